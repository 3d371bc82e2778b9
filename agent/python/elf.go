package python

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/elfcheck"
)

// Interpreter is what an ELF file says about the CPython runtime it holds.
// Addresses are link-time virtual addresses; add the mapping's load bias
// (Bias) for the process's.
type Interpreter struct {
	Major, Minor int
	// VersionFrom says where the version came from: "Py_Version",
	// "_Py_DebugOffsets", "soname", "file name" or "version string".
	VersionFrom string
	Runtime     uint64 // _PyRuntime
	CodeType    uint64 // PyCode_Type, 0 if the file does not say
	Layout      Layout
	LayoutFrom  string // "table" or "_Py_DebugOffsets"
	loads       []elf.ProgHeader
}

// Caps on what Inspect reads of a file a job may have planted: a
// libpython's symbols and their names are well under 1 MiB each, a
// static python's a few MiB. A larger table is skipped (the executable of
// every process is looked at, and a large program is no Python); a file
// over elfcheck's caps is refused whole.
const (
	maxSymtabBytes = 64 << 20
	maxStrtabBytes = 32 << 20
	maxRodataScan  = 32 << 20
)

// elfReader is Inspect as a reader of job files (agent/elfcheck): it
// reads the symbol tables and their names (within its own caps above),
// .dynamic for the soname and .rodata, never frame tables, symbol
// versions or a Go pclntab.
var (
	elfReader = elfcheck.NewReader("python")
	elfLimits = elfcheck.Limits{
		Frames:   elfcheck.Unread,
		Versions: elfcheck.Unread,
		Pclntab:  elfcheck.Unread,
	}
)

// Inspect reads a mapped ELF file (the executable or a libpython) and
// returns its interpreter. name is the file's path, whose base name may
// carry the version (python3.9, libpython3.10.so.1.0). r must say its real
// size, by Size() (bytes.Reader, io.SectionReader) or Stat() (os.File,
// interp.File): the file's sizes are checked against it (agent/elfcheck)
// before anything is parsed. ErrNotPython: no _PyRuntime, or not an ELF
// file; ErrBadInterpreter: sizes that lie (elfcheck.ErrTooLarge) or
// malformed headers; ErrUnknownVersion, ErrUnsupported: a runtime this
// package cannot read, whose process gets native stacks only. A read
// error (a job's read allowance used up) is wrapped, for the caller to
// tell it apart.
func Inspect(r io.ReaderAt, name string, arch Arch) (in *Interpreter, err error) {
	defer func() {
		// A hostile file must cost only its own process its Python frames.
		if p := recover(); p != nil {
			in, err = nil, fmt.Errorf("%w: %s: malformed ELF: %v", ErrBadInterpreter, name, p)
		}
	}()
	size, err := sizeOf(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotPython, name, err)
	}
	f, err := elfReader.Open(r, size, elfLimits)
	switch {
	case errors.Is(err, elfcheck.ErrTooLarge), errors.Is(err, elfcheck.ErrPanic):
		return nil, fmt.Errorf("%w: %s: %w", ErrBadInterpreter, name, err)
	case errors.Is(err, elfcheck.ErrMalformed):
		return nil, fmt.Errorf("%w: %s: %w", ErrNotPython, name, err)
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: %s: not a 64-bit little-endian ELF", ErrUnsupported, name)
	}
	in = &Interpreter{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			in.loads = append(in.loads, p.ProgHeader)
		}
	}
	syms, err := findSymbols(f, "_PyRuntime", "Py_Version", "PyCode_Type")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	rt, ok := syms["_PyRuntime"]
	if !ok || rt == 0 {
		return nil, fmt.Errorf("%w: %s: no _PyRuntime", ErrNotPython, name)
	}
	in.Runtime, in.CodeType = rt, syms["PyCode_Type"]

	var hex uint64
	if v, ok := syms["Py_Version"]; ok {
		var b [8]byte
		found, err := in.read(r, b[:], v)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if found {
			hex = binary.LittleEndian.Uint64(b[:])
			in.Major, in.Minor, in.VersionFrom = int(hex>>24&0xff), int(hex>>16&0xff), "Py_Version" // #nosec G115 -- masked to a byte
		}
	}
	if in.VersionFrom == "" && dynStringsFit(f) {
		so, err := f.DynString(elf.DT_SONAME)
		if errors.Is(err, budget.ErrWorkLimit) {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if err == nil && len(so) > 0 {
			in.versionFromName(so[0], "soname")
		}
	}
	if in.VersionFrom == "" {
		in.versionFromName(filepath.Base(name), "file name")
	}
	if in.VersionFrom == "" {
		in.versionFromString(f)
	}
	if in.VersionFrom == "" {
		return nil, fmt.Errorf("%w: %s", ErrUnknownVersion, name)
	}
	if in.Layout, err = LayoutFor(in.Major, in.Minor, arch); err != nil {
		return nil, fmt.Errorf("%s: %w (version from %s)", name, err, in.VersionFrom)
	}
	in.LayoutFrom = "table"
	if in.Minor == 13 {
		// The runtime's initialiser puts _Py_DebugOffsets in the file's data.
		b := make([]byte, DebugOffsetsSize)
		found, err := in.read(r, b, rt)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if found {
			l, err := ParseDebugOffsets(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if hex != 0 && binary.LittleEndian.Uint64(b[doVersion:])>>16 != hex>>16 {
				return nil, fmt.Errorf("%w: %s: Py_Version 0x%x, _Py_DebugOffsets 0x%x", ErrBadInterpreter, name, hex, binary.LittleEndian.Uint64(b[doVersion:]))
			}
			in.Layout, in.LayoutFrom = l, "_Py_DebugOffsets"
		}
	}
	return in, nil
}

var versionName = regexp.MustCompile(`^(?:lib)?python(\d)\.(\d{1,2})(?:$|[^0-9])`)

func (in *Interpreter) versionFromName(s, from string) {
	if m := versionName.FindStringSubmatch(s); m != nil {
		in.Major, _ = strconv.Atoi(m[1])
		in.Minor, _ = strconv.Atoi(m[2])
		in.VersionFrom = from
	}
}

// PY_VERSION as Py_GetVersion prints it ("3.9.18", "3.11.2+", "3.10.0rc1"),
// NUL-terminated in read-only data.
var versionString = regexp.MustCompile(`\x00(3)\.(\d{1,2})\.\d{1,2}(?:(?:a|b|rc)\d{1,2})?\+?\x00`)

// versionFromString takes the version from PY_VERSION in .rodata, if one and
// only one major.minor appears there as a whole string.
func (in *Interpreter) versionFromString(f *elf.File) {
	s := f.Section(".rodata")
	if s == nil || s.Type != elf.SHT_PROGBITS || s.Size > maxRodataScan {
		return
	}
	b, err := elfcheck.Data(s, maxRodataScan)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, m := range versionString.FindAllSubmatch(b, 64) {
		seen[string(m[1])+"."+string(m[2])] = true
	}
	if len(seen) != 1 {
		return
	}
	for v := range seen {
		in.versionFromName("python"+v, "version string")
	}
}

// findSymbols looks names up in .dynsym, then .symtab (which stripped
// files lack). The tables are streamed, not read whole (debug/elf's
// Symbols would hold every entry, and a copy of every name, at once): what
// is held is one chunk of entries and the table's names, under
// maxStrtabBytes. Only a read error is an error.
func findSymbols(f *elf.File, names ...string) (map[string]uint64, error) {
	out := map[string]uint64{}
	want := map[string]bool{}
	longest := 0
	for _, n := range names {
		want[n] = true
		longest = max(longest, len(n))
	}
	for _, typ := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
		if len(out) == len(want) {
			break
		}
		sec := f.SectionByType(typ)
		if sec == nil || sec.Size > maxSymtabBytes || sec.Flags&elf.SHF_COMPRESSED != 0 ||
			sec.Link == 0 || int(sec.Link) >= len(f.Sections) {
			continue
		}
		str := f.Sections[sec.Link]
		if str.Type != elf.SHT_STRTAB || str.Size > maxStrtabBytes || str.Flags&elf.SHF_COMPRESSED != 0 {
			continue
		}
		strtab := make([]byte, str.Size)
		if err := readAt(str, strtab, 0); err != nil {
			return nil, err
		}
		err := eachSymbol(sec, func(nameOff uint32, shndx uint16, value uint64) {
			if shndx == uint16(elf.SHN_UNDEF) || value == 0 || uint64(nameOff) >= uint64(len(strtab)) {
				return
			}
			b := strtab[nameOff:]
			b = b[:min(len(b), longest+1)]
			end := bytes.IndexByte(b, 0)
			if end < 0 {
				return
			}
			if n := string(b[:end]); want[n] {
				if _, dup := out[n]; !dup {
					out[n] = value
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dynStringsFit reports whether the names .dynamic links to, which
// DynString reads whole, are within maxStrtabBytes.
func dynStringsFit(f *elf.File) bool {
	ds := f.SectionByType(elf.SHT_DYNAMIC)
	return ds != nil && int(ds.Link) < len(f.Sections) && f.Sections[ds.Link].Size <= maxStrtabBytes
}

// symChunk is how many symbol entries are read at a time.
const symChunk = 4096

// eachSymbol calls fn with each ELF64 symbol of sec, after the null one.
func eachSymbol(sec *elf.Section, fn func(nameOff uint32, shndx uint16, value uint64)) error {
	const entSize = elf.Sym64Size
	n := sec.Size / entSize
	buf := make([]byte, min(n, symChunk)*entSize)
	for i := uint64(1); i < n; {
		c := min(n-i, symChunk)
		b := buf[:c*entSize]
		at := int64(i * entSize) // #nosec G115 -- inside the section, under maxSymtabBytes
		if err := readAt(sec, b, at); err != nil {
			return err
		}
		for ; len(b) >= entSize; b = b[entSize:] {
			fn(binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint16(b[6:]), binary.LittleEndian.Uint64(b[8:]))
		}
		i += c
	}
	return nil
}

// readAt fills b from off: a reader may say io.EOF with a full read.
func readAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// sizeOf is the real size of the file r reads.
func sizeOf(r io.ReaderAt) (int64, error) {
	switch f := r.(type) {
	case interface{ Size() int64 }:
		return f.Size(), nil
	case interface{ Stat() (fs.FileInfo, error) }:
		fi, err := f.Stat()
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	return 0, fmt.Errorf("%T does not say its size", r)
}

// read copies len(b) bytes at link-time address vaddr from the file, and
// reports whether a loadable segment holds them in the file (not in .bss,
// not past the file's end). An error is the reader's (a job's read
// allowance used up), for the caller to pass on.
func (in *Interpreter) read(r io.ReaderAt, b []byte, vaddr uint64) (bool, error) {
	for _, p := range in.loads {
		// Written so that nothing wraps: a hostile header's vaddr, size or
		// offset near 2^64 would otherwise pass the check.
		if vaddr < p.Vaddr || vaddr-p.Vaddr > p.Filesz || uint64(len(b)) > p.Filesz-(vaddr-p.Vaddr) {
			continue
		}
		off := vaddr - p.Vaddr
		if p.Off > math.MaxInt64-off {
			return false, nil // beyond any file
		}
		err := readAt(r, b, int64(p.Off+off)) // #nosec G115 -- checked <= MaxInt64 just above
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil // a segment past the file's end
		}
		return err == nil, err
	}
	return false, nil
}

// Bias returns the load bias of a mapping of this file that starts at
// start and maps it from file offset offset: process address = bias +
// link-time address. A mapping begins at the page holding its segment's
// first byte, so offset may lie a little below the segment's.
func (in *Interpreter) Bias(start, offset uint64) (uint64, bool) {
	best, found := uint64(0), false
	gap := uint64(0x10000) // the largest page size (arm64 64K pages)
	for _, p := range in.loads {
		switch {
		case offset >= p.Off && offset < p.Off+max(p.Filesz, 1):
			return start - (p.Vaddr + (offset - p.Off)), true
		case offset < p.Off && p.Off-offset < gap:
			gap, best, found = p.Off-offset, start-(p.Vaddr-(p.Off-offset)), true
		}
	}
	return best, found
}
