package elfcheck

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// dataChunk is how much Data reads at a time: what it holds grows with
// what was read, so a read refused part way (a job's allowance) has not
// cost the whole section's size.
const dataChunk = 4 << 20

// Data returns a section's bytes, decompressed where it is compressed,
// and at most max of them: a section larger by its header, or whose
// compressed stream runs past that, is ErrTooLarge. For the sections a
// reader reads whole (.eh_frame, .debug_frame) in place of debug/elf's
// Section.Data, which reads whatever the header says.
func Data(s *elf.Section, max int64) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("section %s has no data", s.Name)
	}
	if strings.HasPrefix(s.Name, ".zdebug") {
		return nil, tooLarge("%s: a .zdebug section's size is known only while decompressing", s.Name)
	}
	if max < 0 || s.Size > uint64(max) {
		return nil, tooLarge("section %s of %d bytes, over %d", s.Name, s.Size, max)
	}
	size := int64(s.Size) // #nosec G115 -- at most max, an int64
	r := io.LimitReader(s.Open(), size+1)
	out := make([]byte, 0, min(size+1, dataChunk))
	for {
		n := min(dataChunk, size+1-int64(len(out)))
		if n <= 0 {
			return nil, tooLarge("section %s decompresses past the %d bytes it claims", s.Name, size)
		}
		out = slices.Grow(out, int(n))
		m, err := io.ReadFull(r, out[len(out):len(out)+int(n)])
		out = out[:len(out)+m]
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			if int64(len(out)) > size {
				return nil, tooLarge("section %s decompresses past the %d bytes it claims", s.Name, size)
			}
			if int64(len(out)) < size {
				return nil, fmt.Errorf("section %s: %d of %d bytes: %w", s.Name, len(out), size, io.ErrUnexpectedEOF)
			}
			return out, nil
		case err != nil:
			return nil, fmt.Errorf("section %s: %w", s.Name, err)
		}
	}
}
