package symbolize

import (
	"bytes"
	"os"
	"reflect"
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
