package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// Snapshot is one thread of a real process stopped at a known point: its
// registers, its stack, its mappings, trimmed copies of its mapped code
// files, and the frames an independent unwinder (gdb, with the files' full
// DWARF) found from there.
type Snapshot struct {
	Name     string   `json:"name"`
	Workload string   `json:"workload"` // what ran, and where it was stopped
	Command  []string `json:"command"`
	Regs     Regs     `json:"regs"`
	// Stack is the address of the recorded stack bytes (image "stack"),
	// from below the stopped sp to above the outermost frame.
	Stack uint64 `json:"stack"`
	// StackEnd is the end of the stack's mapping in the process: memory
	// between the recorded bytes and it is mapped (zeros) in the replay.
	StackEnd uint64    `json:"stack_end"`
	Mappings []Mapping `json:"mappings"`
	Files    []File    `json:"files"`
	// Frames are gdb's physical frames, innermost first (inlined and tail
	// call frames, which have no stack frame of their own, left out).
	Frames []Frame `json:"frames"`
	// End is how the unwinder must end its walk: "end_of_stack" or
	// "frame_limit" (unwind.EndReasons).
	End    string  `json:"end"`
	Python *Python `json:"python,omitempty"`

	images map[string]*Image
}

// Regs are the stopped thread's registers.
type Regs struct {
	PC     uint64 `json:"pc"`
	SP     uint64 `json:"sp"`
	BP     uint64 `json:"bp"`
	FSBase uint64 `json:"fs_base"` // the thread pointer: pthread_self()
	TID    int    `json:"tid"`
}

// Mapping is a line of the process's /proc/<pid>/maps. File indexes
// Snapshot.Files, -1 for memory that is no file.
type Mapping struct {
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Offset uint64 `json:"offset"`
	Perms  string `json:"perms"`
	Path   string `json:"path,omitempty"`
	File   int    `json:"file"`
}

// File is a mapped file, recorded as a trimmed image (see Trim) of the
// original's size.
type File struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	BuildID string `json:"build_id,omitempty"`
	// Dev, Ino and Mtime are the original's; the replay presents the
	// image under them (the loader identifies files by them).
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Mtime int64  `json:"mtime_ns"`
	// SHA256 is the trimmed image's, zeros included.
	SHA256 string `json:"sha256"`
	Kept   int    `json:"kept_bytes"`
}

// Frame is one frame as gdb unwound it. SP is the frame's stack pointer:
// the CFA of the frame below it. BP is its rbp where gdb could recover it.
type Frame struct {
	PC  uint64  `json:"pc"`
	SP  uint64  `json:"sp"`
	BP  *uint64 `json:"bp,omitempty"`
	Fn  string  `json:"gdb_function,omitempty"` // gdb's name (DWARF or nearest ELF symbol)
	Sym string  `json:"symbol,omitempty"`       // the ELF symbol whose range holds the pc ("" if none)
	Mod string  `json:"module,omitempty"`       // the mapped file's path
	// Signal marks the kernel's signal trampoline (__restore_rt): the
	// frame above it is the interrupted pc itself, not a return address.
	Signal bool `json:"signal,omitempty"`
}

// Python is what a CPython snapshot adds: the raw frames of the stopped
// thread as the BPF walk reads them, and the frames they must resolve to.
type Python struct {
	Version string     `json:"version"`
	Raw     []RawFrame `json:"raw"`
	// Expected is what the script itself saw (sys._getframe), innermost
	// first, with Entry marking the first frame of each C call of the eval
	// loop as the script's structure makes it.
	Expected []PyFrame `json:"expected"`
}

// RawFrame is one frame the walk copies (python.RawFrame's fields).
type RawFrame struct {
	Code    uint64 `json:"code"`
	Check   uint64 `json:"check"`
	Lasti   int32  `json:"lasti"`
	Owner   uint8  `json:"owner"`
	IsEntry uint8  `json:"is_entry"`
}

// PyFrame is a resolved Python frame.
type PyFrame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Entry    bool   `json:"entry"`
}

// Image names.
const (
	imageStack  = "stack"
	imageMemory = "memory" // Python: the process memory the resolver reads
)

func fileImage(i int) string { return fmt.Sprintf("file%d", i) }

// StackImage is the recorded stack, at Snapshot.Stack.
func (s *Snapshot) StackImage() *Image { return s.images[imageStack] }

// MemoryImage is the recorded process memory of a Python snapshot
// (addresses as offsets), nil otherwise.
func (s *Snapshot) MemoryImage() *Image { return s.images[imageMemory] }

// FileImage is the trimmed image of Files[i].
func (s *Snapshot) FileImage(i int) *Image { return s.images[fileImage(i)] }

// SetImages sets the stack, memory (nil if none) and file images, for the
// recorder.
func (s *Snapshot) SetImages(stack, memory *Image, files []*Image) {
	s.images = map[string]*Image{imageStack: stack}
	if memory != nil {
		s.images[imageMemory] = memory
	}
	for i, im := range files {
		s.images[fileImage(i)] = im
	}
}

// File names in a snapshot's directory.
const (
	metaName = "snapshot.json"
	dataName = "images.bin.gz"
)

// Save writes the snapshot into dir.
func (s *Snapshot) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	meta, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, metaName), append(meta, '\n'), 0o600); err != nil {
		return err
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if err := writeImages(zw, s.images); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, dataName), buf.Bytes(), 0o600)
}

// Load reads the snapshot in dir.
func Load(dir string) (*Snapshot, error) {
	meta, err := os.ReadFile(filepath.Join(dir, metaName)) // #nosec G304 -- a test's own testdata
	if err != nil {
		return nil, err
	}
	s := &Snapshot{}
	if err := json.Unmarshal(meta, s); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	f, err := os.Open(filepath.Join(dir, dataName)) // #nosec G304 -- a test's own testdata
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	if s.images, err = readImages(bufio.NewReader(zr)); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if s.StackImage() == nil {
		return nil, fmt.Errorf("%s: no stack image", dir)
	}
	for i := range s.Files {
		if s.FileImage(i) == nil {
			return nil, fmt.Errorf("%s: no image of %s", dir, s.Files[i].Path)
		}
	}
	return s, nil
}

// LoadAll loads every snapshot under root (one directory each), by name.
func LoadAll(root string) ([]*Snapshot, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []*Snapshot
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		s, err := Load(filepath.Join(root, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// The images file: a magic line, then per image its name, size and
// chunks, little endian.
const imagesMagic = "slurmscope-replay-images 1\n"

func writeImages(w io.Writer, images map[string]*Image) error {
	names := make([]string, 0, len(images))
	for n := range images {
		names = append(names, n)
	}
	sort.Strings(names)
	bw := bufio.NewWriter(w)
	bw.WriteString(imagesMagic)
	le := binary.LittleEndian
	for _, n := range names {
		im := images[n]
		var hdr []byte
		hdr = le.AppendUint16(hdr, uint16(len(n))) // #nosec G115 -- our own short names
		hdr = append(hdr, n...)
		hdr = le.AppendUint64(hdr, uint64(im.Size))        // #nosec G115 -- a size, never negative
		hdr = le.AppendUint32(hdr, uint32(len(im.Chunks))) // #nosec G115 -- far fewer than 2^32
		bw.Write(hdr)
		for _, c := range im.Chunks {
			var ch []byte
			ch = le.AppendUint64(ch, c.Off)
			ch = le.AppendUint32(ch, uint32(len(c.Data))) // #nosec G115 -- chunks of files under 4 GiB
			bw.Write(ch)
			bw.Write(c.Data)
		}
	}
	return bw.Flush()
}

// Bounds on what one images file may claim, so that a corrupt file fails
// rather than allocating without end.
const (
	maxImages      = 256
	maxChunkBytes  = 64 << 20
	maxImagesBytes = 256 << 20
)

func readImages(r io.Reader) (map[string]*Image, error) {
	magic := make([]byte, len(imagesMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != imagesMagic {
		return nil, errors.New("not a replay images file")
	}
	le := binary.LittleEndian
	out := map[string]*Image{}
	total := 0
	for {
		var nl [2]byte
		if _, err := io.ReadFull(r, nl[:]); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(out) >= maxImages {
			return nil, errors.New("too many images")
		}
		name := make([]byte, le.Uint16(nl[:]))
		var hdr [12]byte
		if _, err := io.ReadFull(r, name); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, err
		}
		im := &Image{Size: int64(le.Uint64(hdr[:]))} // #nosec G115 -- checked just below
		if im.Size < 0 {
			return nil, fmt.Errorf("image %s: size %d", name, im.Size)
		}
		n := le.Uint32(hdr[8:])
		for range n {
			var ch [12]byte
			if _, err := io.ReadFull(r, ch[:]); err != nil {
				return nil, err
			}
			l := int(le.Uint32(ch[8:]))
			if total += l; l > maxChunkBytes || total > maxImagesBytes {
				return nil, fmt.Errorf("image %s: chunks too large", name)
			}
			c := Chunk{Off: le.Uint64(ch[:]), Data: make([]byte, l)}
			if _, err := io.ReadFull(r, c.Data); err != nil {
				return nil, err
			}
			if k := len(im.Chunks); k > 0 && c.Off < im.Chunks[k-1].Off+uint64(len(im.Chunks[k-1].Data)) {
				return nil, fmt.Errorf("image %s: chunks out of order", name)
			}
			im.Chunks = append(im.Chunks, c)
		}
		out[string(name)] = im
	}
}
