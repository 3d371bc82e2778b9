package symbolize

import (
	"bytes"
	"encoding/binary"
	"sort"
)

// pclnTable reads a Go 1.18+ pclntab where it lies: a lookup binary-searches
// the function table and decodes the function's name, file and line, and
// nothing is held per function. debug/gosym's table held about 240 bytes
// a function besides the pclntab (70 MiB for the agent's own binary,
// which --all-processes profiles); this holds the pclntab only.
type pclnTable struct {
	data     []byte
	text     uint64
	nfunc    int
	quantum  uint32
	funcname []byte
	cutab    []byte
	filetab  []byte
	pctab    []byte
	functab  []byte // nfunc+1 entries of (entry offset, func offset), then the _func records
}

// newPclnTable reads the header of a Go 1.18+ pclntab (plausibleHeader
// held its magic and offsets); ok is false for an older format.
func newPclnTable(data []byte, text uint64) (*pclnTable, bool) {
	if !bytes.Equal(data[:4], pclntabMagics[0]) && !bytes.Equal(data[:4], pclntabMagics[1]) {
		return nil, false
	}
	le := binary.LittleEndian
	word := func(i int) uint64 { return le.Uint64(data[8+i*8:]) }
	n := uint64(len(data))
	nfunc := word(0)
	off := func(i int) []byte {
		if o := word(i); o < n {
			return data[o:]
		}
		return nil
	}
	t := &pclnTable{data: data, text: text, nfunc: int(nfunc), quantum: uint32(data[6]), // #nosec G115 -- nfunc is under maxGoFuncs (plausibleHeader)
		funcname: off(3), cutab: off(4), filetab: off(5), pctab: off(6), functab: off(7)}
	if t.funcname == nil || t.cutab == nil || t.filetab == nil || t.pctab == nil || uint64(len(t.functab)) < (nfunc+1)*8 {
		return nil, false
	}
	return t, true
}

// entry is function i's entry address.
func (t *pclnTable) entry(i int) uint64 {
	return t.text + uint64(binary.LittleEndian.Uint32(t.functab[i*8:]))
}

// lookup returns the function, file and line of pc; ok is false outside
// every function, or where the table does not hold together.
func (t *pclnTable) lookup(pc uint64) (fn, file string, line int, ok bool) {
	if t.nfunc == 0 || pc < t.entry(0) || pc >= t.entry(t.nfunc) {
		return "", "", 0, false
	}
	i := sort.Search(t.nfunc, func(i int) bool { return t.entry(i+1) > pc })
	le := binary.LittleEndian
	foff := uint64(le.Uint32(t.functab[i*8+4:]))
	if foff+40 > uint64(len(t.functab)) {
		return "", "", 0, false
	}
	f := t.functab[foff:]
	entry := t.text + uint64(le.Uint32(f))
	name := cString(t.funcname, le.Uint32(f[4:]))
	if len(name) == 0 {
		return "", "", 0, false
	}
	fn = string(name)
	ln, lok := t.pcvalue(le.Uint32(f[24:]), entry, pc)
	fileno, fok := t.pcvalue(le.Uint32(f[20:]), entry, pc)
	if fok && fileno >= 0 {
		at := (uint64(le.Uint32(f[32:])) + uint64(fileno)) * 4
		if at+4 <= uint64(len(t.cutab)) {
			if fo := le.Uint32(t.cutab[at:]); fo != ^uint32(0) {
				file = string(cString(t.filetab, fo))
			}
		}
	}
	if lok {
		line = int(ln)
	}
	return fn, file, line, true
}

// pcvalue decodes the pc-value table at off for the function at entry and
// returns its value at pc (the runtime's pcvalue).
func (t *pclnTable) pcvalue(off uint32, entry, pc uint64) (int32, bool) {
	if off == 0 || uint64(off) >= uint64(len(t.pctab)) {
		return 0, false
	}
	p := t.pctab[off:]
	val, at := int32(-1), entry
	for first := true; ; first = false {
		uv, n := binary.Uvarint(p)
		if n <= 0 || (uv == 0 && !first) {
			return 0, false
		}
		p = p[n:]
		u := uint32(uv)                   // #nosec G115 -- the runtime's deltas are 32-bit
		val += int32(-(u & 1) ^ (u >> 1)) // #nosec G115 -- zig-zag decoding, as the runtime's step
		pcd, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		at += pcd * uint64(t.quantum)
		if pc < at {
			return val, true
		}
	}
}
