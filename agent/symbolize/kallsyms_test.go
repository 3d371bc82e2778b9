package symbolize

import (
	"bytes"
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestKallsyms(t *testing.T) {
	s := New(Options{KallsymsPath: filepath.Join("testdata", "kallsyms")})
	frames := s.Kernel([]uint64{
		0xffffffff81003010, // leaf in schedule
		0xffffffff81004000, // return address at the start of __x64_sys_read: call was in schedule
		0xffffffff81002010, // data symbol is skipped: still do_one_initcall
		0xffffffffc0a01100, // module
		0x1000,             // below every symbol
	})
	want := []struct{ fn, mod string }{
		{"schedule", KernelModule},
		{"schedule", KernelModule},
		{"do_one_initcall", KernelModule},
		{"nvidia_ioctl", "[nvidia]"},
		{"", KernelModule},
	}
	if len(frames) != len(want) {
		t.Fatalf("frames = %+v", frames)
	}
	for i, w := range want {
		if frames[i].Function != w.fn || frames[i].Module != w.mod {
			t.Errorf("frame %d = %+v, want %s in %s", i, frames[i], w.fn, w.mod)
		}
	}
	if n := s.Stats().Errors[ErrKernelNoSymbol]; n != 1 {
		t.Errorf("kernel_no_symbol = %d, want 1", n)
	}
}

func TestKallsymsHidden(t *testing.T) {
	s := New(Options{KallsymsPath: filepath.Join("testdata", "kallsyms_hidden")})
	for range 3 {
		for _, f := range s.Kernel([]uint64{0xffffffff81003010, 0xffffffff81001010}) {
			if f.Function != "" || f.Module != KernelModule {
				t.Errorf("hidden kallsyms resolved %+v", f)
			}
		}
	}
	if n := s.Stats().Errors[ErrKallsymsHidden]; n != 1 {
		t.Errorf("kallsyms_hidden counted %d times, want once", n)
	}
}

func TestKallsymsMissing(t *testing.T) {
	s := New(Options{KallsymsPath: filepath.Join("testdata", "does-not-exist")})
	if f := s.Kernel([]uint64{0xffffffff81003010}); len(f) != 1 || f[0].Function != "" {
		t.Fatalf("frames = %+v", f)
	}
	if s.Stats().Errors[ErrKallsyms] != 1 {
		t.Error("missing kallsyms not counted")
	}
}

// TestParseKallsymsMatchesFields holds the hand-written splitter to what
// strings.Fields and strconv make of the same lines, odd ones included.
func TestParseKallsymsMatchesFields(t *testing.T) {
	in := strings.Join([]string{
		"ffffffff81000000 T _stext",
		"ffffffff81000010\tt\tstartup_64",
		"  ffffffff81000020   T   padded_name  ",
		"ffffffff81000030 D data_symbol",
		"ffffffff81000040 TT two_letter_type",
		"zzzzffff81000050 T not_hex",
		"1ffffffff81000060 T seventeen_digits",
		"ffffffff81000070 T",
		"",
		"0000000000000000 T zero_address",
		"ffffffffc0a01000 t mod_fn\t[nvidia]",
		"ffffffffc0a01100 t mod_fn2 [nvidia]",
		"ffffffffc0b00000 W weak_in_mod [bad",
		"FFFFFFFFC0C00000 t upper_hex [x]",
	}, "\n")
	got := parseKallsyms(strings.NewReader(in))
	want := referenceKallsyms(in)
	if len(got.syms) != len(want) {
		t.Fatalf("got %d symbols %+v, want %d %+v", len(got.syms), got.syms, len(want), want)
	}
	for i := range want {
		if got.syms[i] != want[i] {
			t.Errorf("symbol %d = %+v, want %+v", i, got.syms[i], want[i])
		}
	}
	if got.syms[len(got.syms)-1].module != "[x]" {
		t.Errorf("upper-case address not parsed: %+v", got.syms)
	}
}

// referenceKallsyms is the straightforward parser the fast one replaced.
func referenceKallsyms(in string) []ksym {
	var out []ksym
	for _, line := range strings.Split(in, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || len(f[1]) != 1 {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || addr == 0 || !strings.ContainsRune("tTwW", rune(f[1][0])) {
			continue
		}
		mod := KernelModule
		if len(f) >= 4 && strings.HasPrefix(f[3], "[") && strings.HasSuffix(f[3], "]") {
			mod = f[3]
		}
		out = append(out, ksym{addr: addr, name: f[2], module: mod})
	}
	slices.SortFunc(out, func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) })
	return out
}

// BenchmarkParseKallsyms parses this machine's /proc/kallsyms as read once
// (the kernel's own printing of it is not in the figure).
func BenchmarkParseKallsyms(b *testing.B) {
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil || len(data) == 0 {
		b.Skip("no /proc/kallsyms")
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		k := parseKallsyms(bytes.NewReader(data))
		if len(k.syms) == 0 && !k.hidden {
			b.Fatal("no symbols")
		}
	}
}
