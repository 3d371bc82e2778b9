package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/elfcheck"
)

// Limits that keep a hostile or absurd file from costing unbounded memory
// (with the caps of elfcheck.go).
const (
	maxSymbols     = 4 << 20  // symbols kept per file
	maxNoteBytes   = 64 << 10 // PT_NOTE bytes read for build ids
	maxProgHeaders = 4096
)

// loadSeg is one PT_LOAD program header.
type loadSeg struct {
	off, filesz, vaddr, memsz uint64
	exec                      bool
}

// objFile is everything kept from one parsed ELF file.
type objFile struct {
	buildID string
	loads   []loadSeg
	syms    symTable
	gotab   *goTable  // nil unless the file has a Go pclntab
	size    int64     // approximate retained bytes, without the results
	failed  ErrorKind // set for a cached parse failure; nothing else is

	// The results cache, shared by every process that maps the file, and
	// the file's charge in the memory budget, which grows with it.
	mu      sync.Mutex
	results resultCache
	charge  *budget.Entry
}

func isPanic(err error) bool { return errors.Is(err, errPanic) || errors.Is(err, elfcheck.ErrPanic) }

// errPanic marks errors recovered from a parser panic.
var errPanic = errors.New("parser panic")

// openObj parses an ELF file of the given size. Every size its headers
// claim is checked first (elfcheck); what it keeps is
// charged with grow as it goes, and an error from grow (the budget, or the
// reader's allowance) ends the parse with that error. It never panics:
// malformed input that trips a parser (ours or the standard library's) is
// reported as errPanic.
func openObj(r io.ReaderAt, size int64, grow func(int64) error) (obj *objFile, err error) {
	defer func() {
		if p := recover(); p != nil {
			obj, err = nil, fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	f, err := elfReader.Open(r, size, elfLimits)
	if err != nil {
		return nil, err
	}
	obj = &objFile{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Filesz > 0 {
			// Checking against the real size keeps every later read, and the
			// buffer it allocates, within the file: a truncated or lying
			// header cannot make us allocate what is not there.
			usize := uint64(size) // #nosec G115 -- a file's size from fstat, not negative
			if p.Off > usize || p.Filesz > usize-p.Off {
				return nil, tooLarge("segment at %#x+%#x beyond the file's %d bytes", p.Off, p.Filesz, size)
			}
			obj.loads = append(obj.loads, loadSeg{
				off: p.Off, filesz: p.Filesz, vaddr: p.Vaddr, memsz: p.Memsz,
				exec: p.Flags&elf.PF_X != 0,
			})
		}
	}
	if len(obj.loads) == 0 {
		return nil, errors.New("no PT_LOAD segments")
	}
	isGo := false
	obj.buildID, isGo = readNotes(f)
	if obj.syms, err = loadSymbols(f, r, grow); err != nil {
		return nil, err
	}
	if obj.gotab, err = loadGoTable(f, r, obj.loads, &obj.syms, isGo, grow); err != nil {
		return nil, err
	}
	obj.size = objBaseBytes + obj.syms.size()
	if obj.gotab != nil {
		obj.size += obj.gotab.size
	}
	return obj, nil
}

// objBaseBytes is what a parsed file costs with no symbols: its
// structures, and the entry for a file that failed to parse.
const objBaseBytes = 1024

// vaddr converts a file offset into the ELF virtual address it is loaded at.
// Mappings are page granular, so an offset can fall in the slack between two
// segments; then there is no answer.
func (o *objFile) vaddr(fileOff uint64) (uint64, bool) {
	for _, s := range o.loads {
		if fileOff >= s.off && fileOff-s.off < s.filesz {
			return fileOff - s.off + s.vaddr, true
		}
	}
	return 0, false
}

// resolve symbolises an ELF virtual address: Go pclntab first (it knows file,
// line and Go's own naming), then the ELF symbol tables (C code in cgo
// binaries and everything else). cached says the answer came from the
// results cache.
func (o *objFile) resolve(vaddr uint64) (out []resolved, cached bool) {
	o.mu.Lock()
	r, ok := o.results.get(vaddr)
	o.mu.Unlock()
	if ok {
		return r, true
	}
	if o.gotab != nil {
		out = o.gotab.lookup(vaddr)
	}
	if out == nil {
		if name, ok := o.syms.lookup(vaddr); ok {
			out = []resolved{{function: demangleName(name)}}
		}
	}
	o.mu.Lock()
	charge, before := o.charge, o.results.bytes
	o.results.put(vaddr, out)
	after := o.results.bytes
	o.mu.Unlock()
	// The charge follows the cache in steps, not per result.
	if charge != nil && (after/resultChargeStep != before/resultChargeStep) {
		if err := charge.Resize(o.size + after); err != nil {
			o.mu.Lock()
			o.results = resultCache{} // over the job's share: cache no more
			o.mu.Unlock()
			charge.Resize(o.size)
		}
	}
	return out, false
}

// readNotes returns the GNU build id (hex) and whether a Go build note is
// present. Notes are read through program headers so that binaries without
// section headers still work.
func readNotes(f *elf.File) (buildID string, isGo bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz == 0 || p.Filesz > maxNoteBytes {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			continue
		}
		align := uint64(4)
		if p.Align == 8 {
			align = 8
		}
		for len(data) >= 12 {
			namesz := uint64(f.ByteOrder.Uint32(data[0:]))
			descsz := uint64(f.ByteOrder.Uint32(data[4:]))
			typ := f.ByteOrder.Uint32(data[8:])
			nameEnd := 12 + alignUp(namesz, 4)
			descEnd := nameEnd + alignUp(descsz, align)
			if namesz > uint64(len(data)) || descsz > uint64(len(data)) || nameEnd+descsz > uint64(len(data)) {
				break
			}
			name := string(data[12 : 12+namesz])
			desc := data[nameEnd : nameEnd+descsz]
			switch {
			case typ == 3 && name == "GNU\x00" && buildID == "":
				buildID = hex.EncodeToString(desc)
			case typ == 4 && name == "Go\x00\x00":
				isGo = true
			case typ == 4 && name == "Go\x00":
				isGo = true
			}
			if descEnd >= uint64(len(data)) {
				break
			}
			data = data[descEnd:]
		}
	}
	return buildID, isGo
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// ptrReader reads pointer-sized words in the file's byte order.
type ptrReader struct {
	order   binary.ByteOrder
	ptrSize int
}

func (p ptrReader) word(b []byte) uint64 {
	if p.ptrSize == 4 {
		return uint64(p.order.Uint32(b))
	}
	return p.order.Uint64(b)
}
