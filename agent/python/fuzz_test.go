package python

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/slurmscope/slurmscope/agent/interp"
)

// The path from what a process supplies to what the agent indexes with
// it: its _Py_DebugOffsets (ParseDebugOffsets), then its code objects and
// strings read with the layout they give (readCode, readString), then the
// tracker as a whole. The seed corpus (testdata/fuzz) holds a real 3.13
// code object with good offsets, and the forgeries.

// wrapMem is a process's memory in which every address is readable: it
// repeats image over the whole address space, so that any pointer the
// fuzzer writes leads somewhere and the readers go on parsing.
type wrapMem struct{ image []byte }

func (m wrapMem) ReadAt(p []byte, addr uint64) error {
	if len(m.image) == 0 {
		return errors.New("EFAULT")
	}
	n := uint64(len(m.image))
	for i := range p {
		p[i] = m.image[(addr+uint64(i))%n]
	}
	return nil
}

// checkCode holds what readCode returned to its bounds.
func checkCode(t *testing.T, c *codeInfo) {
	t.Helper()
	if len(c.name) > 4*maxStringChars || len(c.file) > 4*maxStringChars || c.tableLen > maxLineTable {
		t.Fatalf("read %d, %d and %d bytes: past the bounds", len(c.name), len(c.file), c.tableLen)
	}
	for _, off := range []int{-1, 0, 2, 64, 1 << 20} {
		if l := c.lines.line(off); l < 0 && off >= 0 {
			t.Fatalf("negative line %d", l)
		}
	}
}

// FuzzDebugOffsetsToCode: any debug offsets either fail to parse or give
// a layout that passes check and that reads any memory without panicking
// and within its bounds.
func FuzzDebugOffsetsToCode(f *testing.F) {
	f.Add(debugOffsetsOf(layouts[13], 0x030d00f0), codeImage(layouts[13]), uint64(imageBase))
	f.Fuzz(func(t *testing.T, offsets, image []byte, addr uint64) {
		if len(image) > 1<<16 {
			return
		}
		l, err := ParseDebugOffsets(offsets)
		if err != nil {
			return
		}
		if err := l.check(); err != nil {
			t.Fatalf("ParseDebugOffsets gave a layout check refuses: %v", err)
		}
		mem := wrapMem{image}
		if c, err := readCode(mem, &l, 0, addr); err == nil {
			checkCode(t, c)
		}
		if s, err := readString(mem, &l, addr+0x600); err == nil && len(s) > 4*maxStringChars {
			t.Fatalf("a string of %d bytes", len(s))
		}
	})
}

// FuzzReadCode: with every table layout, any memory reads without
// panicking and within its bounds.
func FuzzReadCode(f *testing.F) {
	f.Add(uint8(13), codeImage(layouts[13]), uint64(imageBase))
	f.Add(uint8(9), codeImage(layouts[9]), uint64(imageBase))
	f.Fuzz(func(t *testing.T, minor uint8, image []byte, addr uint64) {
		l, ok := layouts[int(minor)]
		if !ok || len(image) > 1<<16 {
			return
		}
		if c, err := readCode(wrapMem{image}, &l, 0, addr); err == nil {
			checkCode(t, c)
		}
	})
}

// FuzzTrackerResolve: a 3.13 process whose file holds any debug offsets
// and whose memory holds anything resolves any frames without a panic (a
// panic the tracker recovers still fails: it must not happen).
func FuzzTrackerResolve(f *testing.F) {
	f.Add(debugOffsetsOf(layouts[13], 0x030d00f0), codeImage(layouts[13]), uint64(0), uint64(0), int32(2))
	f.Fuzz(func(t *testing.T, offsets, image []byte, code, check uint64, lasti int32) {
		if len(image) > 1<<16 {
			return
		}
		l, err := ParseDebugOffsets(offsets)
		if err != nil {
			return
		}
		fp := newFakeProc(t, nil)
		fp.layout = &l
		// Everything but the interpreter's file is anonymous memory.
		lib := fp.maps.maps[42][1:3]
		fp.maps.maps[42] = []Mapping{fp.maps.maps[42][0], lib[0], lib[1],
			{Start: 0x1000, End: libBase - 0x100000, Perms: "rw-p"}}
		// A runtime that validates (for layout l), over the image.
		rt := &fakeMem{seg: map[uint64][]byte{}}
		rt.put64(runtime0+uint64(l.RuntimeInterpretersHead), interp0)
		rt.put64(interp0+uint64(l.InterpThreadsHead), tstate0)
		rt.put64(tstate0+uint64(l.TstateInterp), interp0)
		mem := overlay{rt, wrapMem{image}}
		fp.tracker.o.Memory = func(interp.Process) Memory { return mem }
		fp.tracker.Announce(interp.Process{PID: 42, StartNs: 5, MM: 1})
		if _, ok := fp.procs[42]; !ok {
			t.Fatalf("not set up: %+v", fp.tracker.Stats().Skipped)
		}
		code = imageBase + code%(1<<45)
		st := fp.tracker.Resolve(pyProc, stackOf(RawFrame{Code: code, Check: check, Lasti: lasti}, RawFrame{Code: code + 8, Check: check}))
		if n := fp.tracker.Stats().Skipped["read_panic"]; n != 0 {
			t.Fatalf("reading the process panicked")
		}
		for _, fr := range st.Frames {
			if len(fr.Function) > 4*maxStringChars || len(fr.File) > 4*maxStringChars {
				t.Fatalf("a frame past the bounds: %d, %d bytes", len(fr.Function), len(fr.File))
			}
		}
	})
}

// overlay reads from its first memory where that holds the bytes, else
// from the second.
type overlay struct {
	first  *fakeMem
	second Memory
}

func (o overlay) ReadAt(p []byte, addr uint64) error {
	if o.first.ReadAt(p, addr) == nil {
		return nil
	}
	return o.second.ReadAt(p, addr)
}

// imageBase is where codeImage's pointers point: a multiple of its size,
// in the fuzzed process's anonymous memory.
const imageBase = 0x100000

// codeImage is memory holding, at imageBase (mod its size), a code object
// (of type codeType, as the fake processes' PyCode_Type)
// of layout l named "Model.forward" in "/job/model.py", first line 10, with
// a location table of two entries (line 12, then 12 again): what a real
// 3.11+ process holds.
func codeImage(l Layout) []byte {
	b := make([]byte, 0x800)
	put64 := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	str := func(at int, s string) {
		put64(at+int(l.UnicodeLength), uint64(len(s)))
		binary.LittleEndian.PutUint32(b[at+int(l.UnicodeState):], 1<<2|1<<5|1<<6)
		copy(b[at+int(l.ASCIISize):], s)
	}
	put64(int(l.ObType), codeType)
	put64(int(l.CodeFilename), imageBase+0x400)
	put64(int(l.CodeName), imageBase+0x500)
	if l.CodeQualname != NoOffset {
		put64(int(l.CodeQualname), imageBase+0x600)
	}
	put64(int(l.CodeLineTable), imageBase+0x700)
	binary.LittleEndian.PutUint32(b[l.CodeFirstLineNo:], 10)
	str(0x400, "/job/model.py")
	str(0x500, "forward")
	str(0x600, "Model.forward")
	put64(0x700+int(l.VarSize), 3)
	copy(b[0x700+int(l.BytesData):], []byte{0x80 | 12<<3 | 1, 0x80 | 13<<3 | 0, 4})
	return b
}

// TestCodeImage: the seeds' image is a code object the readers accept, so
// that the fuzzers start from a good object.
func TestCodeImage(t *testing.T) {
	for _, minor := range SupportedVersions() {
		l := layouts[minor]
		c, err := readCode(wrapMem{codeImage(l)}, &l, 0, imageBase)
		if err != nil {
			t.Fatalf("3.%d: %v", minor, err)
		}
		want := "Model.forward"
		if l.CodeQualname == NoOffset {
			want = "forward"
		}
		if c.name != want || c.file != "/job/model.py" || (l.Lines == LineLocations && c.lines.line(2) != 12) {
			t.Errorf("3.%d: %q in %q, line %d", minor, c.name, c.file, c.lines.line(2))
		}
	}
}
