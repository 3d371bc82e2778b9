package recorder

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/python"
	"github.com/slurmscope/slurmscope/agent/unwind/cfi"
	"github.com/slurmscope/slurmscope/agent/unwind/replay"
)

// stop is what gdbstop.py writes at the stop point.
type stop struct {
	PID    int         `json:"pid"`
	TID    int         `json:"tid"`
	PC     uint64      `json:"pc"`
	SP     *uint64     `json:"sp"`
	BP     *uint64     `json:"bp"`
	FSBase uint64      `json:"fs_base"`
	Frames []stopFrame `json:"frames"`
}

type stopFrame struct {
	PC     uint64  `json:"pc"`
	SP     *uint64 `json:"sp"`
	BP     *uint64 `json:"bp"`
	Fn     string  `json:"fn"`
	Signal bool    `json:"signal"`
}

// maxFrames is UNWIND_MAX_FRAMES: a longer stack must end the walk at
// the frame limit.
const maxFrames = 127

// Record runs w under gdb to its stop point and takes the snapshot while
// gdb holds the process stopped.
func Record(w Workload) (*replay.Snapshot, error) {
	workDir := w.workDir
	cfgPath, outPath, goPath := filepath.Join(workDir, "gdb.json"), filepath.Join(workDir, "stop.json"), filepath.Join(workDir, "go")
	scriptPath := filepath.Join(workDir, "gdbstop.py")
	for _, p := range []string{outPath, goPath} {
		if err := os.RemoveAll(p); err != nil {
			return nil, err
		}
	}
	cfg, err := json.Marshal(map[string]any{"setup": append([]string{}, w.Setup...), "after": append([]string{}, w.After...), "out": outPath, "go": goPath, "signal": w.Signal})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(scriptPath, gdbScript, 0o600); err != nil {
		return nil, err
	}
	args := []string{"-q", "-batch", "-nx", "-iex", "set auto-load python-scripts off",
		"-ex", "python REPLAY_CFG = " + strconv.Quote(cfgPath), "-x", scriptPath, "--args"}
	cmd := exec.Command("gdb", append(args, w.Argv...)...) // #nosec G204 -- the recorder's own workloads
	// The workload inherits gdb's environment: a fixed minimal one, so
	// that the stack's top is the same on every machine.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	cmd.Dir = workDir
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		os.WriteFile(goPath, nil, 0o600)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	stopped := make(chan error, 1)
	var gdbOut bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			gdbOut.WriteString(sc.Text() + "\n")
			if sc.Text() == "REPLAY-STOPPED" {
				stopped <- nil
				io.Copy(io.Discard, stdout)
				return
			}
		}
		stopped <- errors.New("gdb ended before the stop point")
	}()
	select {
	case err := <-stopped:
		if err != nil {
			cmd.Wait()
			return nil, fmt.Errorf("%w\n%s%s", err, gdbOut.String(), errOut.String())
		}
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		return nil, errors.New("no stop within 120 s")
	}
	b, err := os.ReadFile(outPath) // #nosec G304 -- our own work directory
	if err != nil {
		return nil, err
	}
	var st stop
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	return capture(w, &st)
}

// file is a mapped code file being recorded.
type file struct {
	path  string
	orig  []byte
	progs []elf.ProgHeader
	syms  *replay.Symbols
	info  replay.File
	keep  replay.Keep
	// python: the interpreter inspector read this file.
	python bool
}

func capture(w Workload, st *stop) (*replay.Snapshot, error) {
	if st.SP == nil || len(st.Frames) == 0 {
		return nil, errors.New("no registers or frames")
	}
	maps, err := procfs.New("").Maps(st.PID, nil)
	if err != nil {
		return nil, err
	}
	s := &replay.Snapshot{
		Name: w.Name, Workload: w.Desc, Command: w.Argv,
		Regs: replay.Regs{PC: st.PC, SP: *st.SP, FSBase: st.FSBase, TID: st.TID},
		End:  "end_of_stack",
	}
	if st.BP != nil {
		s.Regs.BP = *st.BP
	}
	if len(st.Frames) > maxFrames {
		s.End = "frame_limit"
	}

	// Files: every file with an executable mapping, and the vDSO (from
	// memory), in the order first mapped.
	var files []*file
	byPath := map[string]int{}
	for _, m := range maps {
		if !m.Exec() || (!m.FileBacked() && m.Path != "[vdso]") {
			continue
		}
		if _, ok := byPath[m.Path]; ok {
			continue
		}
		f := &file{path: m.Path}
		if m.Path == "[vdso]" {
			if f.orig, err = readMem(st.PID, m.Start, m.End-m.Start); err != nil {
				return nil, err
			}
			f.info = replay.File{Path: m.Path, Size: int64(len(f.orig)), Ino: 1}
		} else {
			if f.orig, err = os.ReadFile(m.Path); err != nil {
				return nil, err
			}
			fi, err := os.Stat(m.Path)
			if err != nil {
				return nil, err
			}
			sys := fi.Sys().(*syscall.Stat_t)
			f.info = replay.File{Path: m.Path, Size: fi.Size(), Dev: sys.Dev, Ino: sys.Ino, Mtime: fi.ModTime().UnixNano()}
		}
		if f.progs, err = replay.Progs(bytes.NewReader(f.orig)); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		if f.syms, err = replay.ReadSymbols(bytes.NewReader(f.orig)); err != nil {
			return nil, err
		}
		f.info.BuildID = replay.BuildID(bytes.NewReader(f.orig))
		byPath[m.Path] = len(files)
		files = append(files, f)
	}
	for _, m := range maps {
		rm := replay.Mapping{Start: m.Start, End: m.End, Offset: m.Offset, Perms: m.Perms, Path: m.Path, File: -1}
		if i, ok := byPath[m.Path]; ok && (m.FileBacked() || m.Path == "[vdso]") {
			rm.File = i
		}
		s.Mappings = append(s.Mappings, rm)
	}

	// Frames, named by the symbol holding the pc (pc-1 for a return
	// address), and what each file must keep for them.
	for i, gf := range st.Frames {
		if gf.SP == nil {
			return nil, fmt.Errorf("frame %d: no sp", i)
		}
		fr := replay.Frame{PC: gf.PC, SP: *gf.SP, BP: gf.BP, Fn: gf.Fn, Signal: gf.Signal}
		exact := i == 0 || st.Frames[i-1].Signal
		if m, ok := s.MappingAt(gf.PC); ok && m.File >= 0 {
			f := files[m.File]
			fr.Mod = f.path
			if v, ok := replay.Vaddr(f.progs, m, gf.PC); ok {
				look := v
				if !exact {
					look = v - 1
				}
				fr.Sym = f.syms.Name(look)
				f.keep.Addrs = append(f.keep.Addrs, v, look)
			}
		}
		s.Frames = append(s.Frames, fr)
	}
	if last := s.Frames[len(s.Frames)-1]; last.Sym != "_start" {
		return nil, fmt.Errorf("gdb's outermost frame is %q (%s), not _start", last.Sym, last.Fn)
	}

	// The stack, from a little below sp to a little above the outermost
	// frame (below argv's strings and the environment).
	sm, ok := s.MappingAt(s.Regs.SP)
	if !ok {
		return nil, errors.New("sp in no mapping")
	}
	lo := max(sm.Start, (s.Regs.SP-256)&^63)
	hi := min(sm.End, s.Frames[len(s.Frames)-1].SP+512)
	stack, err := readMem(st.PID, lo, hi-lo)
	if err != nil {
		return nil, err
	}
	s.Stack, s.StackEnd = lo, sm.End
	stackImage := &replay.Image{Size: int64(len(stack)), Chunks: []replay.Chunk{{Off: lo, Data: stack}}} // #nosec G115 -- a stack copy's length

	var memory *replay.Image
	if w.Python != 0 {
		if memory, err = capturePython(w, st, s, maps, files); err != nil {
			return nil, err
		}
	}

	images := make([]*replay.Image, len(files))
	for i, f := range files {
		im, err := replay.Trim(f.orig, f.keep)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		if err := verifyTrim(f, im); err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		f.info.SHA256, f.info.Kept = im.SHA256(), im.Kept()
		s.Files = append(s.Files, f.info)
		images[i] = im
	}
	s.SetImages(stackImage, memory, images)
	return s, nil
}

// verifyTrim holds the trimmed image to the original for what the replay
// uses: the table rows at the kept addresses, the symbols there, and the
// interpreter the inspector finds.
func verifyTrim(f *file, im *replay.Image) error {
	ot, oerr := cfi.Build(bytes.NewReader(f.orig), int64(len(f.orig)), cfi.Limits{})
	tt, terr := cfi.Build(im, im.Size, cfi.Limits{})
	if (oerr == nil) != (terr == nil) {
		return fmt.Errorf("table: original %v, trimmed %v", oerr, terr)
	}
	syms, err := replay.ReadSymbols(im)
	if err != nil {
		return err
	}
	for _, a := range f.keep.Addrs {
		if oerr == nil {
			if o, t := ot.Lookup(a), tt.Lookup(a); o != t {
				return fmt.Errorf("row at 0x%x: original %v, trimmed %v", a, o, t)
			}
		}
		if o, t := f.syms.Name(a), syms.Name(a); o != t {
			return fmt.Errorf("symbol at 0x%x: original %q, trimmed %q", a, o, t)
		}
	}
	if f.python {
		o, oerr := python.Inspect(bytes.NewReader(f.orig), f.path, python.AMD64)
		t, terr := python.Inspect(io.NewSectionReader(im, 0, im.Size), f.path, python.AMD64)
		if (oerr == nil) != (terr == nil) {
			return fmt.Errorf("inspect: original %v, trimmed %v", oerr, terr)
		}
		if oerr == nil && (o.Major != t.Major || o.Minor != t.Minor || o.Runtime != t.Runtime || o.CodeType != t.CodeType ||
			o.Layout != t.Layout || o.VersionFrom != t.VersionFrom || o.LayoutFrom != t.LayoutFrom) {
			return fmt.Errorf("inspect: original %+v, trimmed %+v", o, t)
		}
	}
	return nil
}

func readMem(pid int, addr, n uint64) ([]byte, error) {
	b := make([]byte, n)
	if err := python.ProcessMemory(pid).ReadAt(b, addr); err != nil {
		return nil, err
	}
	return b, nil
}

// capturePython takes the Python frames of the stopped thread as the BPF
// walk reads them, resolves them with agent/python as the agent does
// (recording what that reads of the files and of memory), and holds them
// to what the script saw.
func capturePython(w Workload, st *stop, s *replay.Snapshot, maps []procfs.Mapping, files []*file) (*replay.Image, error) {
	lv := &live{pid: st.PID, maps: maps, reads: map[string]*[][2]uint64{}}
	in, runtime, err := findInterpreter(lv, maps)
	if err != nil {
		return nil, err
	}
	if in.Minor != w.Python {
		return nil, fmt.Errorf("CPython 3.%d, want 3.%d", in.Minor, w.Python)
	}
	raw, truncated, err := walk(python.ProcessMemory(st.PID), &in.Layout, runtime, uint64(st.TID), st.FSBase) // #nosec G115 -- a tid
	if err != nil {
		return nil, err
	}
	if truncated {
		return nil, errors.New("the Python stack is deeper than the walk keeps")
	}
	// Only what the resolver reads is kept, not what the walk itself
	// read: the replay resolves, the walk's frames are stored.
	lv.reads = map[string]*[][2]uint64{}
	stack, err := replay.ResolvePython(lv, st.PID, raw, false)
	if err != nil {
		return nil, err
	}
	want, err := scriptStack(w)
	if err != nil {
		return nil, err
	}
	got := make([]replay.PyFrame, len(stack.Frames))
	for i, f := range stack.Frames {
		got[i] = replay.PyFrame{Function: f.Function, File: f.File, Line: f.Line, Entry: f.Entry}
	}
	if !reflect.DeepEqual(got, want) {
		return nil, fmt.Errorf("resolved Python frames %+v, the script saw %+v", got, want)
	}
	s.Python = &replay.Python{Version: fmt.Sprintf("%d.%d", in.Major, in.Minor), Raw: raw, Expected: want}

	for path, rs := range lv.reads {
		i := -1
		for j, f := range files {
			if f.path == path {
				i = j
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("the inspector read %s, which has no executable mapping", path)
		}
		f := files[i]
		f.python = true
		f.keep.Names = append(f.keep.Names, "_PyRuntime", "Py_Version", "PyCode_Type")
		kept, err := outsideSymbols(f.orig, *rs)
		if err != nil {
			return nil, err
		}
		f.keep.Ranges = append(f.keep.Ranges, kept...)
	}
	// Memory, in 64-byte blocks around what was read (never across a
	// page: 64 divides it), so that a resolver reading a field more or
	// less still finds its bytes.
	var rs [][2]uint64
	for _, r := range lv.mem {
		lo, hi := r[0]&^63, (r[0]+r[1]+63)&^63
		rs = append(rs, [2]uint64{lo, hi - lo})
	}
	return replay.Collect(0, rs, 0, func(off, n uint64) ([]byte, error) { return readMem(st.PID, off, n) })
}

// outsideSymbols returns the read ranges less what lies in symbol and
// string tables: Trim keeps the entries wanted there, not whole tables.
func outsideSymbols(orig []byte, rs [][2]uint64) ([][2]uint64, error) {
	f, err := elf.NewFile(bytes.NewReader(orig))
	if err != nil {
		return nil, err
	}
	var skip [][2]uint64
	for _, s := range f.Sections {
		if s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM || s.Type == elf.SHT_STRTAB {
			skip = append(skip, [2]uint64{s.Offset, s.Offset + s.Size})
		}
	}
	var out [][2]uint64
	for _, r := range rs {
		parts := [][2]uint64{{r[0], r[0] + r[1]}}
		for _, k := range skip {
			var next [][2]uint64
			for _, p := range parts {
				if p[1] <= k[0] || p[0] >= k[1] {
					next = append(next, p)
					continue
				}
				if p[0] < k[0] {
					next = append(next, [2]uint64{p[0], k[0]})
				}
				if p[1] > k[1] {
					next = append(next, [2]uint64{k[1], p[1]})
				}
			}
			parts = next
		}
		for _, p := range parts {
			if p[1]-p[0] > 64<<10 {
				return nil, fmt.Errorf("the inspector read %d bytes at 0x%x: too much to keep", p[1]-p[0], p[0])
			}
			out = append(out, [2]uint64{p[0], p[1] - p[0]})
		}
	}
	return out, nil
}

// scriptStack reads the stack pyprog.py wrote, and marks the frames that
// begin a C call of the eval loop: on 3.9 and 3.10 every frame; on 3.11+
// the frames called from C, Worker.key (by map) and <module> (by
// PyEval_EvalCode).
func scriptStack(w Workload) ([]replay.PyFrame, error) {
	b, err := os.ReadFile(w.Argv[len(w.Argv)-1])
	if err != nil {
		return nil, err
	}
	var out []replay.PyFrame
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("script stack line %q", line)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, err
		}
		entry := w.Python <= 10 || f[0] == "Worker.key" || f[0] == "<module>"
		out = append(out, replay.PyFrame{Function: f[0], File: f[1], Line: n, Entry: entry})
	}
	return out, nil
}

// live is the stopped process for agent/python's Tracker, recording what
// it reads of each file and of memory.
type live struct {
	pid   int
	maps  []procfs.Mapping
	reads map[string]*[][2]uint64
	mem   [][2]uint64
}

var _ replay.PythonProcess = (*live)(nil)

func (l *live) Maps(int) ([]python.Mapping, error) { return l.maps, nil }

func (l *live) OpenMapped(_ int, m python.Mapping) (interp.File, error) {
	f, err := os.Open(m.Path)
	if err != nil {
		return nil, err
	}
	rs := l.reads[m.Path]
	if rs == nil {
		rs = &[][2]uint64{}
		l.reads[m.Path] = rs
	}
	return &recFile{File: f, reads: rs}, nil
}

func (l *live) StatMapped(_ int, m python.Mapping) (procfs.FileInfo, error) {
	fi, err := os.Stat(m.Path)
	if err != nil {
		return procfs.FileInfo{}, err
	}
	info := procfs.FileInfo{Size: fi.Size(), MtimeNsec: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.ID = procfs.FileID{Dev: st.Dev, Ino: st.Ino}
	}
	return info, nil
}

func (l *live) Memory(interp.Process) python.Memory { return recMemory{l} }

type recFile struct {
	*os.File
	reads *[][2]uint64
}

func (f *recFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if n > 0 {
		*f.reads = append(*f.reads, [2]uint64{uint64(off), uint64(n)}) // #nosec G115 -- a read's offset and length, never negative
	}
	return n, err
}

type recMemory struct{ l *live }

func (m recMemory) ReadAt(p []byte, addr uint64) error {
	if err := python.ProcessMemory(m.l.pid).ReadAt(p, addr); err != nil {
		return err
	}
	m.l.mem = append(m.l.mem, [2]uint64{addr, uint64(len(p))})
	return nil
}

// findInterpreter finds the file holding _PyRuntime as the Tracker does
// (the executable, or a file named python) and the runtime's address.
func findInterpreter(lv *live, maps []procfs.Mapping) (*python.Interpreter, uint64, error) {
	first := true
	seen := map[string]bool{}
	for _, m := range maps {
		if m.Path == "" || m.Inode == 0 || strings.HasPrefix(m.Path, "[") {
			continue
		}
		isFirst := first
		first = false
		if seen[m.Path] || !(isFirst || strings.Contains(filepath.Base(m.Path), "python")) {
			continue
		}
		seen[m.Path] = true
		f, err := os.Open(m.Path)
		if err != nil {
			return nil, 0, err
		}
		in, err := python.Inspect(f, m.Path, python.AMD64)
		f.Close()
		if err != nil {
			continue
		}
		bias, ok := in.Bias(m.Start, m.Offset)
		if !ok {
			return nil, 0, fmt.Errorf("%s: no bias", m.Path)
		}
		return in, in.Runtime + bias, nil
	}
	return nil, 0, errors.New("no CPython runtime in the mapped files")
}
