package unwind

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/unwind/cfi"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// BenchmarkTableMemory reports, for the largest shared libraries found on
// the machine, the bytes of table the unwinder loads per MiB of .text, how
// long building it takes and what the build allocates per byte of table
// (build-alloc/table: the agent's transient memory):
//
//	go test -run '^$' -bench TableMemory -benchtime 1x ./agent/unwind/
func BenchmarkTableMemory(b *testing.B) {
	var files []string
	for _, pat := range []string{
		"/usr/lib/x86_64-linux-gnu/libLLVM-*.so.1", "/usr/lib/llvm-*/lib/libclang-cpp.so.*", "/usr/lib/chromium/chromium",
		"/usr/lib/x86_64-linux-gnu/libz3.so.*", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/x86_64-linux-gnu/libpython3.*.so.1.0",
		"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libopenblas*.so*",
		"/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.*.*.*", "/usr/lib/x86_64-linux-gnu/openblas*/libblas.so.3",
	} {
		m, _ := filepath.Glob(pat)
		for _, f := range m {
			if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
				files = append(files, f)
			}
		}
	}
	if len(files) == 0 {
		b.Skip("no libraries")
	}
	for _, path := range files {
		b.Run(filepath.Base(path), func(b *testing.B) {
			for range b.N {
				text := textBytes(b, path)
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				fi, _ := f.Stat()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				t0 := time.Now()
				tab, err := cfi.Build(f, fi.Size(), cfi.Limits{})
				took := time.Since(t0)
				f.Close()
				if err != nil {
					b.Fatal(err)
				}
				var bytes int
				if !tab.FramePointer {
					elems, _ := encode(tab)
					bytes = len(elems) * 8
				}
				runtime.ReadMemStats(&after)
				if bytes > 0 {
					b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(bytes), "build-alloc/table")
				}
				mib := float64(text) / (1 << 20)
				b.ReportMetric(mib, "text-MiB")
				b.ReportMetric(float64(bytes)/(1<<20), "table-MiB")
				b.ReportMetric(float64(bytes)/mib/1024, "table-KiB/text-MiB")
				b.ReportMetric(float64(len(tab.Rows)), "rows")
				b.ReportMetric(took.Seconds()*1e3/mib, "build-ms/text-MiB")
			}
		})
	}
}

func textBytes(b *testing.B, path string) uint64 {
	f, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if s := f.Section(".text"); s != nil {
		return s.Size
	}
	b.Fatalf("%s: no .text", path)
	return 0
}

// BenchmarkTrainingJobTables loads the tables of every executable mapping
// of a Python process that imported numpy (the part of a training job that
// runs on the CPU here: python, libpython, libc, libstdc++, numpy's
// extension modules and its BLAS), the way the agent does, and reports the
// table memory:
//
//	go test -run '^$' -bench TrainingJob -benchtime 1x ./agent/unwind/
func BenchmarkTrainingJobTables(b *testing.B) {
	testenv.RequireIntegration(b, testenv.Root)
	// Debian's python3 (whose numpy is python3-numpy) before any other.
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			b.Skip("no python3")
		}
	}
	cmd := exec.Command(py, "-c", "import numpy, numpy.linalg, ctypes, json, ssl, sys; print('ready', flush=True); sys.stdin.read()")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); cmd.Process.Kill(); cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		b.Skipf("python3 with numpy: %q %v", line, err)
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	ticks, _ := strconv.ParseUint(fields[19], 10, 64)
	for range b.N {
		l, err := NewLoader(Options{Maps: procfs.Mapped{FS: procfs.New("")}, Opener: procfs.Mapped{FS: procfs.New("")}})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := l.SyncProcess(cmd.Process.Pid, ticks); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		s := l.Stats()
		l.Close()
		b.ReportMetric(float64(s.TableBytes)/(1<<20), "table-MiB")
		b.ReportMetric(float64(s.Files), "files")
		b.ReportMetric(float64(s.Tables), "tables")
		b.ReportMetric(float64(s.MappingEntries), "lpm-entries")
		b.ReportMetric(took.Seconds()*1e3, "sync-ms")
		b.ReportMetric(float64(s.TableBudgetBytes)/(1<<20), "budget-MiB")
	}
}
