package elfcheck

import (
	"errors"
	"io"
)

// snapshot is the file as check read it: the header ranges it checked are
// served from what it read, everything else from the file. A job may
// rewrite its file at any time; debug/elf must parse the headers that
// were checked, not later ones.
type snapshot struct {
	r       io.ReaderAt
	patches []patch // consistent where they overlap: see read
}

type patch struct {
	off  uint64
	data []byte
}

var _ io.ReaderAt = (*snapshot)(nil)

// read reads n bytes at off (inside the file: the caller checked) and
// keeps them. Where they overlap bytes read before, the earlier bytes win,
// so that what was checked first is never contradicted by what is read
// after it.
func (s *snapshot) read(off, n uint64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := readFull(s.r, b, off); err != nil {
		return nil, err
	}
	s.apply(b, off)
	s.patches = append(s.patches, patch{off, b})
	return b, nil
}

// apply copies the kept bytes that overlap [off, off+len(b)) into b.
func (s *snapshot) apply(b []byte, off uint64) {
	end := off + uint64(len(b))
	for _, p := range s.patches {
		pend := p.off + uint64(len(p.data))
		if p.off >= end || pend <= off {
			continue
		}
		lo, hi := max(off, p.off), min(end, pend)
		copy(b[lo-off:hi-off], p.data[lo-p.off:hi-p.off])
	}
}

// ReadAt implements io.ReaderAt.
func (s *snapshot) ReadAt(b []byte, off int64) (int, error) {
	n, err := s.r.ReadAt(b, off)
	if off < 0 || n <= 0 {
		return n, err
	}
	at := uint64(off) // #nosec G115 -- not negative (just above)
	s.apply(b[:n], at)
	return n, err
}

// readFull reads len(b) bytes at off; a reader may report io.EOF with a
// full read at the end of the file.
func readFull(r io.ReaderAt, b []byte, off uint64) (int, error) {
	if off > 1<<63-1 {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := r.ReadAt(b, int64(off)) // #nosec G115 -- checked just above
	if n == len(b) && errors.Is(err, io.EOF) {
		err = nil
	}
	if err == nil && n < len(b) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}
