package cfi

import (
	"os"
	"testing"
)

// BenchmarkBuildLarge builds the table of a large C++ library (LLVM's,
// as clang installs it, or $SLURMSCOPE_BENCH_ELF, e.g. Debian's
// libtorch_cpu.so.1.13.0) and reports what one build allocates:
//
//	go test -run '^$' -bench BuildLarge -benchtime 3x ./agent/unwind/cfi/
func BenchmarkBuildLarge(b *testing.B) {
	path := "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1"
	if p := os.Getenv("SLURMSCOPE_BENCH_ELF"); p != "" {
		path = p
	}
	f, err := os.Open(path)
	if err != nil {
		b.Skip(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	b.ReportAllocs()
	var rows int
	for b.Loop() {
		t, err := Build(f, fi.Size(), Limits{})
		if err != nil {
			b.Fatal(err)
		}
		rows = len(t.Rows)
	}
	b.ReportMetric(float64(rows), "rows")
}
