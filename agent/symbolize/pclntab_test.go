package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"os"
	"testing"
)

// The in-place reader of a Go 1.18+ pclntab agrees with debug/gosym on
// every function of this test binary: name, file and line at its entry,
// its middle and its last byte.
func TestPclnTableMatchesGosym(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".gopclntab")
	if sec == nil {
		t.Skip("no .gopclntab")
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text").Addr
	if syms, err := f.Symbols(); err == nil {
		for _, s := range syms {
			if s.Name == "runtime.text" {
				text = s.Value
			}
		}
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil {
		t.Fatal(err)
	}
	pt, ok := newPclnTable(data, text)
	if !ok {
		t.Fatal("this binary's pclntab is not read in place")
	}
	if pt.nfunc != len(tab.Funcs) {
		t.Fatalf("%d functions, gosym %d", pt.nfunc, len(tab.Funcs))
	}
	checked := 0
	for _, fn := range tab.Funcs {
		for _, pc := range []uint64{fn.Entry, fn.Entry + (fn.End-fn.Entry)/2, fn.End - 1} {
			wantFile, wantLine, wantFn := tab.PCToLine(pc)
			if wantLine < 0 {
				wantLine = 0 // no line table (cgo's C functions): unknown, as pprof has it
			}
			name, file, line, ok := pt.lookup(pc)
			if !ok || wantFn == nil || name != wantFn.Name || file != wantFile || line != wantLine {
				t.Fatalf("pc %#x: %q %s:%d %v; gosym %v %s:%d", pc, name, file, line, ok, wantFn, wantFile, wantLine)
			}
			checked++
		}
	}
	if _, _, _, ok := pt.lookup(tab.Funcs[len(tab.Funcs)-1].End + 0x1000); ok {
		t.Error("an address past the last function resolved")
	}
	t.Logf("%d addresses in %d functions agree", checked, len(tab.Funcs))
}
