package cfi

import (
	"encoding/binary"
	"errors"
)

var errTruncated = errors.New("truncated")

// reader decodes little-endian DWARF data from a bounded slice. Every read
// checks what is left; a short read sets err and returns zeros, so callers
// check err once after a group of reads.
type reader struct {
	b   []byte
	off int // offset of b[0] within the section, for pc-relative pointers
	pos int
	err error
}

func (r *reader) left() int { return len(r.b) - r.pos }

func (r *reader) fail() {
	if r.err == nil {
		r.err = errTruncated
	}
	r.pos = len(r.b)
}

func (r *reader) u8() uint8 {
	if r.left() < 1 {
		r.fail()
		return 0
	}
	v := r.b[r.pos]
	r.pos++
	return v
}

func (r *reader) u16() uint16 {
	if r.left() < 2 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.pos:])
	r.pos += 2
	return v
}

func (r *reader) u32() uint32 {
	if r.left() < 4 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.pos:])
	r.pos += 4
	return v
}

func (r *reader) u64() uint64 {
	if r.left() < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.pos:])
	r.pos += 8
	return v
}

// uleb reads an unsigned LEB128. More than 10 bytes, or bits beyond 64, is
// an error: a hostile number cannot make us loop or wrap silently.
func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if r.left() < 1 || shift > 63 {
			r.fail()
			return 0
		}
		c := r.b[r.pos]
		r.pos++
		if shift == 63 && c&0x7e != 0 {
			r.fail()
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	for {
		if r.left() < 1 || shift > 63 {
			r.fail()
			return 0
		}
		c := r.b[r.pos]
		r.pos++
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *reader) bytes(n uint64) []byte {
	left := uint64(r.left()) // #nosec G115 -- left is never negative
	if left < n {
		r.fail()
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)] // #nosec G115 -- n <= left, checked above
	r.pos += int(n)                // #nosec G115 -- n <= left, checked above
	return b
}

// cstring reads a NUL-terminated string of at most max bytes.
func (r *reader) cstring(max int) string {
	for i := r.pos; i < len(r.b) && i-r.pos <= max; i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.pos:i])
			r.pos = i + 1
			return s
		}
	}
	r.fail()
	return ""
}

// Pointer encodings (DW_EH_PE_*, LSB "Exception Frames").
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePcrel   = 0x10
	peDatarel = 0x30
	peOmit    = 0xff
	peIndir   = 0x80
)

var errEncoding = errors.New("unsupported pointer encoding")

// pointer reads a pointer in encoding enc. secAddr is the virtual address
// of the section's first byte (for pc-relative pointers), dataAddr the
// base of data-relative ones (the .eh_frame_hdr section, 0 if none). A
// pointer that would need reading memory (indirect) or a base we do not
// know is an error.
func (r *reader) pointer(enc uint8, secAddr, dataAddr uint64) (uint64, error) {
	if enc == peOmit {
		return 0, errEncoding
	}
	at := secAddr + uint64(r.off+r.pos) // #nosec G115 -- offsets in a section are never negative
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = r.u64()
	case peUleb128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peSdata2:
		v = uint64(int64(int16(r.u16()))) // #nosec G115 -- sign extension, as sdata2 means
	case peUdata4:
		v = uint64(r.u32())
	case peSdata4:
		v = uint64(int64(int32(r.u32()))) // #nosec G115 -- sign extension, as sdata4 means
	case peSleb128:
		v = uint64(r.sleb()) // #nosec G115 -- two's complement, as sleb128 pointers mean
	default:
		return 0, errEncoding
	}
	if r.err != nil {
		return 0, r.err
	}
	if enc&peIndir != 0 {
		return 0, errEncoding
	}
	switch enc & 0x70 {
	case 0:
	case pePcrel:
		v += at
	case peDatarel:
		if dataAddr == 0 {
			return 0, errEncoding
		}
		v += dataAddr
	default:
		return 0, errEncoding
	}
	return v, nil
}

// pointerSize returns the size of a fixed-size encoding's value, for pc
// ranges (which use the format but never the application of the encoding).
func rangeValue(r *reader, enc uint8) (uint64, error) {
	return r.pointer(enc&0x0f, 0, 0)
}
