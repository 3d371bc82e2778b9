package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Memory reads a process's memory. Reads never stop the process (no
// ptrace): process_vm_readv, which needs only the right to ptrace it.
type Memory interface {
	// ReadAt fills p from address addr, or fails: a short read is an error.
	ReadAt(p []byte, addr uint64) error
}

// ProcessMemory reads the memory of process pid with process_vm_readv.
type ProcessMemory int

var _ Memory = ProcessMemory(0)

var errShortRead = errors.New("short read")

func (pid ProcessMemory) ReadAt(p []byte, addr uint64) error {
	if len(p) == 0 {
		return nil
	}
	local := []unix.Iovec{{Base: &p[0]}}
	local[0].SetLen(len(p))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
	n, err := unix.ProcessVMReadv(int(pid), local, remote, 0)
	if err != nil {
		return fmt.Errorf("read %d bytes at 0x%x of pid %d: %w", len(p), addr, int(pid), err)
	}
	if n != len(p) {
		return fmt.Errorf("read %d bytes at 0x%x of pid %d: %w (%d)", len(p), addr, int(pid), errShortRead, n)
	}
	return nil
}

// Whether a read faults pages in, and so whether it may wait on a file
// system the job runs. A page that is in the process's page tables (or,
// anonymous, in swap) is read without any file I/O; a page that is not
// would be fetched, from a file the job may serve itself. So reads of a
// process are of resident pages only, as /proc/<pid>/pagemap says: it is
// read without faulting anything in.

// errNotResident: a page of the read is not in memory.
var errNotResident = errors.New("page not resident in the process's memory")

// pager says whether pages of a process are resident.
type pager interface {
	// resident reports whether every page of [addr, addr+n) is in the
	// process's page tables, or in swap.
	resident(addr uint64, n int) (bool, error)
	close()
}

// pagedMemory is a Memory that offers a pager, opened for one batch of
// reads. A Memory without one (a snapshot, a test's) reads whatever it
// holds.
type pagedMemory interface {
	Memory
	pager() (pager, error)
}

var _ pagedMemory = ProcessMemory(0)

func (pid ProcessMemory) pager() (pager, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", int(pid)))
	if err != nil {
		return nil, err
	}
	return pagemap{f}, nil
}

// pagemap is /proc/<pid>/pagemap: one 64-bit entry per page of the
// address space (Documentation/admin-guide/mm/pagemap.rst).
type pagemap struct{ f *os.File }

const (
	pagemapPresent = 1 << 63
	pagemapSwapped = 1 << 62
	// maxResidentPages bounds one check (a 64 KiB line table spans 17).
	maxResidentPages = 64
)

var pageSize = uint64(os.Getpagesize()) // #nosec G115 -- a positive constant of the system

func (p pagemap) resident(addr uint64, n int) (bool, error) {
	if n <= 0 {
		return true, nil
	}
	first, last := addr/pageSize, (addr+uint64(n)-1)/pageSize
	if last < first || last-first >= maxResidentPages {
		return false, nil
	}
	var buf [maxResidentPages * 8]byte
	b := buf[:(last-first+1)*8]
	if first > math.MaxInt64/8 {
		return false, nil
	}
	off := int64(first * 8) // #nosec G115 -- checked just above
	if _, err := p.f.ReadAt(b, off); err != nil {
		return false, err
	}
	for i := 0; i < len(b); i += 8 {
		if e := binary.LittleEndian.Uint64(b[i:]); e&(pagemapPresent|pagemapSwapped) == 0 {
			return false, nil
		}
	}
	return true, nil
}

func (p pagemap) close() { p.f.Close() }

func readPtr(m Memory, addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// field64 and field32 read the little-endian field at off of b; false when
// b does not hold all of it. Offsets come from a layout that a process may
// have supplied: they are never trusted to fit.
func field64(b []byte, off uint16) (uint64, bool) {
	if int(off)+8 > len(b) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[off:]), true
}

func field32(b []byte, off uint16) (uint32, bool) {
	if int(off)+4 > len(b) {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[off:]), true
}

// errLayout: a layout whose fields do not fit what they index (one that
// Layout.check would refuse).
var errLayout = fmt.Errorf("%w: layout does not fit the object", ErrBadInterpreter)

// Bounds on what one code object may make us read.
const (
	maxStringChars = 1024     // a name or a file path
	maxLineTable   = 64 << 10 // a line table: a function of tens of thousands of lines
)

// readString reads a str object: compact strings only (every name and file
// of a code object is one), of at most maxStringChars characters, decoded to
// UTF-8. Invalid code points become U+FFFD.
func readString(m Memory, l *Layout, addr uint64) (string, error) {
	if addr == 0 {
		return "", errors.New("NULL string")
	}
	size := max(int(l.CompactSize), int(l.ASCIISize), int(l.UnicodeLength)+8, int(l.UnicodeState)+4)
	if size > maxStrHeader {
		return "", errLayout
	}
	hdr := make([]byte, size)
	if err := m.ReadAt(hdr, addr); err != nil {
		return "", err
	}
	n, ok1 := field64(hdr, l.UnicodeLength)
	state, ok2 := field32(hdr, l.UnicodeState)
	if !ok1 || !ok2 {
		return "", errLayout
	}
	kind, compact, ascii := int(state>>2&7), state>>5&1 == 1, state>>6&1 == 1
	if !compact || (kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1) {
		return "", fmt.Errorf("%w: str at 0x%x: state 0x%x", ErrBadInterpreter, addr, state)
	}
	if n > maxStringChars {
		return "", fmt.Errorf("%w: str at 0x%x: %d characters", ErrBadInterpreter, addr, n)
	}
	data := addr + uint64(l.CompactSize)
	if ascii {
		data = addr + uint64(l.ASCIISize)
	}
	buf := make([]byte, int(n)*kind)
	if err := m.ReadAt(buf, data); err != nil {
		return "", err
	}
	switch {
	case ascii:
		for i, c := range buf {
			if c >= 0x80 {
				buf[i] = '?'
			}
		}
		return string(buf), nil
	case kind == 1: // Latin-1
		out := make([]byte, 0, len(buf)*2)
		for _, c := range buf {
			out = utf8.AppendRune(out, rune(c))
		}
		return string(out), nil
	case kind == 2:
		out := make([]byte, 0, len(buf))
		for i := 0; i+1 < len(buf); i += 2 {
			out = utf8.AppendRune(out, rune(binary.LittleEndian.Uint16(buf[i:])))
		}
		return string(out), nil
	default:
		out := make([]byte, 0, len(buf))
		for i := 0; i+3 < len(buf); i += 4 {
			r := rune(binary.LittleEndian.Uint32(buf[i:]))
			if !utf8.ValidRune(r) {
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		}
		return string(out), nil
	}
}

// readBytes reads a bytes object of at most limit bytes.
func readBytes(m Memory, l *Layout, addr uint64, limit int) ([]byte, error) {
	if addr == 0 {
		return nil, errors.New("NULL bytes")
	}
	n, err := readPtr(m, addr+uint64(l.VarSize))
	if err != nil {
		return nil, err
	}
	if limit < 0 || n > uint64(limit) {
		return nil, fmt.Errorf("%w: bytes at 0x%x: %d bytes, limit %d", ErrBadInterpreter, addr, n, limit)
	}
	b := make([]byte, n)
	return b, m.ReadAt(b, addr+uint64(l.BytesData))
}
