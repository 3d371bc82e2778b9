package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Image is a sparse copy of a file or of a range of process memory: the
// kept chunks at their offsets, zeros everywhere else. A trimmed ELF file
// keeps its size, so offsets, section headers and the size the table
// builder is given stay the original file's.
type Image struct {
	Size   int64   // bytes the image stands for (a file's size; memory: unused)
	Chunks []Chunk // sorted by Off, not overlapping
}

// Chunk is one kept range of an Image.
type Chunk struct {
	Off  uint64
	Data []byte
}

var _ io.ReaderAt = (*Image)(nil)

// ReadAt reads as from the whole file: zeros outside the chunks, io.EOF
// at or past Size.
func (im *Image) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("replay: negative offset")
	}
	if off >= im.Size {
		return 0, io.EOF
	}
	n := len(p)
	var err error
	if int64(n) > im.Size-off {
		n, err = int(im.Size-off), io.EOF
	}
	if _, ok := im.fill(p[:n], uint64(off)); !ok {
		return 0, errors.New("replay: image offset overflows")
	}
	return n, err
}

// fill copies what the chunks hold of [addr, addr+len(p)) into p, zeroing
// the rest, and reports whether every byte was in a chunk.
func (im *Image) fill(p []byte, addr uint64) (covered, ok bool) {
	end := addr + uint64(len(p))
	if end < addr {
		return false, false
	}
	clear(p)
	got := 0
	i, _ := slices.BinarySearchFunc(im.Chunks, addr, func(c Chunk, a uint64) int {
		switch {
		case c.Off+uint64(len(c.Data)) <= a:
			return -1
		case c.Off > a:
			return 1
		}
		return 0
	})
	for ; i < len(im.Chunks) && im.Chunks[i].Off < end; i++ {
		c := im.Chunks[i]
		lo, hi := max(c.Off, addr), min(c.Off+uint64(len(c.Data)), end)
		if lo >= hi {
			continue
		}
		got += copy(p[lo-addr:hi-addr], c.Data[lo-c.Off:hi-c.Off])
	}
	return got == len(p), true
}

// Read fills p from address addr, which every byte must be kept at: the
// replay of a process's memory, where a byte not recorded is an error,
// not a zero.
func (im *Image) Read(p []byte, addr uint64) error {
	covered, ok := im.fill(p, addr)
	if !ok || !covered {
		return fmt.Errorf("replay: %d bytes at 0x%x were not recorded", len(p), addr)
	}
	return nil
}

// Bytes is the whole image, zeros included.
func (im *Image) Bytes() []byte {
	b := make([]byte, im.Size)
	for _, c := range im.Chunks {
		copy(b[c.Off:], c.Data)
	}
	return b
}

// Kept is the number of bytes the chunks hold.
func (im *Image) Kept() int {
	n := 0
	for _, c := range im.Chunks {
		n += len(c.Data)
	}
	return n
}

// SHA256 hashes the whole image (zeros included), for the identity a
// snapshot records of each trimmed file.
func (im *Image) SHA256() string {
	h := sha256.New()
	var zeros [4096]byte
	pos := uint64(0)
	pad := func(to uint64) {
		for pos < to {
			n := min(to-pos, uint64(len(zeros)))
			h.Write(zeros[:n])
			pos += n
		}
	}
	for _, c := range im.Chunks {
		pad(c.Off)
		h.Write(c.Data)
		pos += uint64(len(c.Data))
	}
	pad(uint64(im.Size)) // #nosec G115 -- a file size, never negative
	return hex.EncodeToString(h.Sum(nil))
}

// Collect builds an image of size bytes from ranges {offset, length},
// read by read; ranges less than gap bytes apart become one chunk.
func Collect(size int64, rs [][2]uint64, gap uint64, read func(off, n uint64) ([]byte, error)) (*Image, error) {
	var k ranges
	for _, r := range rs {
		k.add(r[0], r[1])
	}
	chunks, err := k.chunks(gap, read)
	if err != nil {
		return nil, err
	}
	return &Image{Size: size, Chunks: chunks}, nil
}

// ranges collects byte ranges to keep and turns them into chunks of src.
type ranges struct{ r [][2]uint64 }

func (k *ranges) add(off, n uint64) {
	if n > 0 {
		k.r = append(k.r, [2]uint64{off, off + n})
	}
}

// chunks merges the ranges (and those closer than gap bytes) and copies
// them out of read.
func (k *ranges) chunks(gap uint64, read func(off, n uint64) ([]byte, error)) ([]Chunk, error) {
	slices.SortFunc(k.r, func(a, b [2]uint64) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	var merged [][2]uint64
	for _, r := range k.r {
		if n := len(merged); n > 0 && r[0] <= merged[n-1][1]+gap {
			merged[n-1][1] = max(merged[n-1][1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	out := make([]Chunk, 0, len(merged))
	for _, r := range merged {
		b, err := read(r[0], r[1]-r[0])
		if err != nil {
			return nil, err
		}
		out = append(out, Chunk{Off: r[0], Data: b})
	}
	return out, nil
}
