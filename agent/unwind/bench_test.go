package unwind_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// BenchmarkSampleCost measures the BPF run time per sample of the unwinder
// and of bpf_get_stack's frame-pointer walk (--unwind=fp), attached side
// by side to the same process at 997 Hz, with kernel.bpf_stats_enabled
// for the run. Both programs send the same ring buffer event, so the
// difference is the unwinding. The two fire together, and whichever runs
// second finds the task, the stack and the ring buffer in cache, so each
// workload runs in both orders: compare a program first with the other
// first. Run it with
//
//	go test -run '^$' -bench SampleCost -benchtime 1x ./agent/unwind/
func BenchmarkSampleCost(b *testing.B) {
	testenv.RequireIntegration(b, testenv.Root, testenv.BTF)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	for _, c := range []struct{ name, bin, mode string }{
		{"split-6-frames", "unwindc", "split"},
		{"exceptions-10-frames", "unwindcxx", "except"},
		{"recursion-127-frames", "unwindcxx", "deep"},
	} {
		for _, order := range []string{"unwind-first", "fp-first"} {
			b.Run(c.name+"/"+order, func(b *testing.B) {
				fpFirst = order == "fp-first"
				defer func() { fpFirst = false }()
				for range b.N {
					w := start(b, filepath.Join(workloads(b), c.bin), c.mode, 30)
					p := sample(b, w, 5*time.Second, true, "")
					if p.unwindRuns == 0 || p.fpRuns == 0 {
						b.Fatalf("no runs counted: %d %d", p.unwindRuns, p.fpRuns)
					}
					u := float64(p.unwindRun.Nanoseconds()) / float64(p.unwindRuns)
					f := float64(p.fpRun.Nanoseconds()) / float64(p.fpRuns)
					frames := 0
					for _, s := range p.unwound {
						frames += s.n
					}
					b.ReportMetric(u, "unwind-ns/sample")
					b.ReportMetric(f, "fp-ns/sample")
					b.ReportMetric(u/f, "unwind/fp")
					b.ReportMetric(float64(frames)/float64(max(1, len(p.unwound))), "frames/sample")
					b.ReportMetric(float64(p.counters.RowCacheHits)/float64(max(1, p.counters.FramesTable)), "row-cache-hits/table-frame")
				}
			})
		}
	}
}
