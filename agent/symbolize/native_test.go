package symbolize

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// TestNativeBinaries builds small C and C++ programs and symbolises a known
// function's address in the running process through the real /proc.
func TestNativeBinaries(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libtarget.so")
	compile(t, "gcc", "-O1", "-g0", "-shared", "-fPIC", "-o", lib, srcPath("lib.c"))

	cases := []struct {
		name   string
		build  func(out string)
		env    []string
		want   string
		module string // suffix of Frame.Module
	}{
		{
			name:  "non-PIE",
			build: func(out string) { compile(t, "gcc", "-O1", "-no-pie", "-fno-pie", "-o", out, srcPath("target.c")) },
			want:  "target_function",
		},
		{
			name:  "PIE",
			build: func(out string) { compile(t, "gcc", "-O1", "-pie", "-fPIE", "-o", out, srcPath("target.c")) },
			want:  "target_function",
		},
		{
			name: "shared library",
			build: func(out string) {
				compile(t, "gcc", "-O1", "-o", out, srcPath("uselib.c"), "-L"+dir, "-ltarget", "-Wl,-rpath,"+dir)
			},
			want:   "lib_target_function",
			module: "libtarget.so",
		},
		{
			name:  "C++ template",
			build: func(out string) { compile(t, "g++", "-O1", "-o", out, srcPath("template.cc")) },
			want:  "slurmscope_test::twice<int>",
		},
		{
			// -s drops .symtab; -rdynamic exports every function in .dynsym.
			name:  "dynsym only",
			build: func(out string) { compile(t, "gcc", "-O1", "-s", "-rdynamic", "-o", out, srcPath("target.c")) },
			want:  "target_function",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			tc.build(bin)
			pid, addr := startTarget(t, bin, tc.env...)
			s := New(Options{})
			frames := s.User(procfs.ID{PID: pid}, leafAndReturn(addr))
			checkResolves(t, frames, tc.want)
			module := tc.module
			if module == "" {
				module = filepath.Base(bin)
			}
			for _, f := range frames {
				if !strings.HasSuffix(f.Module, module) {
					t.Errorf("module %q, want suffix %q", f.Module, module)
				}
			}
			if st := s.Stats(); st.FileCacheMisses != 1 {
				t.Errorf("file cache misses = %d, want 1 (one file parsed once): %+v", st.FileCacheMisses, st)
			}
		})
	}
}

// TestDynsymOnlyHasNoSymtab guards the dynsym case above: if the toolchain
// ever kept .symtab, that case would pass without exercising .dynsym.
func TestDynsymOnlyHasNoSymtab(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stripped")
	compile(t, "gcc", "-O1", "-s", "-rdynamic", "-o", bin, srcPath("target.c"))
	f := openELFForTest(t, bin)
	if f.Section(".symtab") != nil {
		t.Fatal("binary still has .symtab")
	}
	if f.Section(".dynsym") == nil {
		t.Fatal("binary has no .dynsym")
	}
}
