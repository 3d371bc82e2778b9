package symbolize

import (
	"path/filepath"
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
