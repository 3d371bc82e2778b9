package symbolize

import (
	"bytes"
	"os"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// benchStack returns 32 addresses inside distinct functions of this test
// binary, leaf first, each +1 so return-address adjustment stays in range.
func benchStack(tb testing.TB) []uint64 {
	fns := []any{
		strings.Index, strings.Split, strings.Fields, strings.TrimSpace, strings.HasPrefix,
		strings.Contains, strings.Repeat, strings.ToLower, bytes.Index, bytes.Equal,
		bytes.TrimSpace, bytes.Fields, strconv.Itoa, strconv.ParseUint, strconv.Quote,
		strconv.FormatInt, sort.Ints, sort.Strings, sort.Search, os.Getpid,
		os.Getenv, os.ReadFile, reflect.ValueOf, reflect.TypeOf, procfs.ParseMapsLine,
		procfs.ParseMaps, findMapping, demangleName, parsePerfMapLine, parseKallsyms,
		procfs.ParseStat, procfs.ParseStatus,
	}
	addrs := make([]uint64, 0, len(fns))
	for _, fn := range fns {
		addrs = append(addrs, uint64(reflect.ValueOf(fn).Pointer())+1)
	}
	return addrs
}

func TestBenchStackResolves(t *testing.T) {
	s := New(Options{})
	frames := s.User(procfs.ID{PID: os.Getpid()}, benchStack(t))
	if frames[0].Function != "strings.Index" || !strings.HasSuffix(frames[len(frames)-1].Function, "procfs.ParseStatus") {
		t.Fatalf("first/last frames = %+v / %+v", frames[0], frames[len(frames)-1])
	}
	for _, f := range frames {
		if f.Function == "" {
			t.Errorf("unresolved %+v", f)
		}
	}
}

// BenchmarkUserCached32 measures the steady state: files parsed and
// addresses resolved once, then every stack served from the caches.
func BenchmarkUserCached32(b *testing.B) {
	s := New(Options{})
	pid := os.Getpid()
	addrs := benchStack(b)
	s.User(procfs.ID{PID: pid}, addrs)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s.User(procfs.ID{PID: pid}, addrs)
	}
}

// BenchmarkSymbolTable loads the symbols of a large C++ library (LLVM's,
// as clang installs it, or $SLURMSCOPE_BENCH_ELF) and reports what the table holds per symbol on the
// heap, and what a lookup costs.
func BenchmarkSymbolTable(b *testing.B) {
	path := "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1"
	if p := os.Getenv("SLURMSCOPE_BENCH_ELF"); p != "" {
		path = p // e.g. Debian's libtorch_cpu.so.1.13
	}
	f, err := os.Open(path)
	if err != nil {
		b.Skip(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	ef, err := elfReader.Open(f, fi.Size(), elfLimits)
	if err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t, err := loadSymbols(ef, f, func(int64) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := t.len()
	addrs := make([]uint64, 0, 1024)
	for i := 0; i < n && len(addrs) < cap(addrs); i += max(1, n/cap(addrs)) {
		if _, ok := t.lookup(t.addrAt(i)); ok { // not data (NOTYPE symbols past the code)
			addrs = append(addrs, t.addrAt(i))
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, ok := t.lookup(addrs[i%len(addrs)]); !ok {
			b.Fatal("a symbol's address did not resolve")
		}
	}
	// After the loop: ResetTimer drops reported metrics.
	b.ReportMetric(float64(n), "symbols")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/symbol")
	b.ReportMetric(float64(t.size())/float64(n), "charged-B/symbol")
	b.ReportMetric((float64(after.HeapObjects)-float64(before.HeapObjects))/float64(n), "objects/symbol")
	runtime.KeepAlive(t)
}
