package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// Limits that keep a hostile or absurd file from costing unbounded memory.
const (
	maxSymbols      = 4 << 20   // symbols kept per file
	maxNoteBytes    = 64 << 10  // PT_NOTE bytes read for build ids
	maxSegmentBytes = 512 << 20 // segment bytes read when scanning for pclntab
	maxProgHeaders  = 4096
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
	gotab   *goTable // nil unless the file has a Go pclntab
	results resultCache
	size    int64     // approximate retained bytes, for the cache budget
	failed  ErrorKind // set for a cached parse failure; nothing else is
}

func isPanic(err error) bool { return errors.Is(err, errPanic) }

// errPanic marks errors recovered from a parser panic.
var errPanic = errors.New("parser panic")

// openObj parses an ELF file of the given size. It never panics: malformed input that trips a
// parser (ours or the standard library's) is reported as errPanic.
func openObj(r io.ReaderAt, size int64) (obj *objFile, err error) {
	defer func() {
		if p := recover(); p != nil {
			obj, err = nil, fmt.Errorf("%w: %v", errPanic, p)
		}
	}()
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	if len(f.Progs) > maxProgHeaders {
		return nil, fmt.Errorf("%d program headers", len(f.Progs))
	}
	obj = &objFile{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Filesz > 0 {
			// Checking against the real size keeps every later read, and the
			// buffer it allocates, within the file: a truncated or lying
			// header cannot make us allocate what is not there.
			if p.Off > uint64(size) || p.Filesz > uint64(size)-p.Off {
				return nil, fmt.Errorf("segment at %#x+%#x beyond end of file", p.Off, p.Filesz)
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
	obj.syms = loadSymbols(f)
	obj.gotab = loadGoTable(f, r, obj.loads, &obj.syms, isGo)
	obj.size = 1024 + obj.syms.size()
	if obj.gotab != nil {
		obj.size += obj.gotab.size
	}
	return obj, nil
}

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
// binaries and everything else).
func (o *objFile) resolve(vaddr uint64) []resolved {
	if r, ok := o.results.get(vaddr); ok {
		return r
	}
	var out []resolved
	if o.gotab != nil {
		out = o.gotab.lookup(vaddr)
	}
	if out == nil {
		if name, ok := o.syms.lookup(vaddr); ok {
			out = []resolved{{function: demangleName(name)}}
		}
	}
	o.results.put(vaddr, out)
	return out
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

// readSegment reads a PT_LOAD segment's file bytes, bounded.
func readSegment(r io.ReaderAt, s loadSeg) ([]byte, error) {
	if s.filesz > maxSegmentBytes {
		return nil, fmt.Errorf("segment of %d bytes", s.filesz)
	}
	buf := make([]byte, s.filesz)
	n, err := r.ReadAt(buf, int64(s.off))
	if n < len(buf) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

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
