package replay_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/unwind"
	"github.com/slurmscope/slurmscope/agent/unwind/replay"
	"github.com/slurmscope/slurmscope/agent/unwind/unwindtest"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// TestBPFWalk runs unwind.h itself (the replay probe, by
// BPF_PROG_TEST_RUN in this process) from each snapshot's registers,
// over its stack mapped here at its recorded address, through the tables
// agent/unwind's Loader built from the trimmed files and loaded for the
// snapshot's mappings as this process's: the walk must give gdb's pcs,
// frame for frame (the first 127), every frame from a table row, and end
// as recorded.
func TestBPFWalk(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	b := newBPFReplay(t)
	for _, s := range snapshots(t) {
		t.Run(s.Name, func(t *testing.T) { b.check(t, s) })
	}
}

// bpfReplay is one loader and one probe for every snapshot (the verifier
// takes a second or more per load), the process unloaded between
// snapshots: their trimmed copies of one library share its identity.
type bpfReplay struct {
	l     *unwind.Loader
	r     *unwindtest.Replay
	cur   *current
	pid   int
	ticks uint64
}

func newBPFReplay(t *testing.T) *bpfReplay {
	t.Helper()
	b := &bpfReplay{cur: &current{}, pid: os.Getpid(), ticks: selfStartTicks(t)}
	var err error
	// No idle tables: each snapshot's trimmed copy of a file carries the
	// original's identity, with other contents than the last one's.
	if b.l, err = unwind.NewLoader(unwind.Options{IdleTableBytes: -1, Maps: b.cur, Opener: b.cur, NoVDSO: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.l.Close)
	if b.r, err = unwindtest.LoadReplay(b.l.Maps().Replace); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.r.Close)
	return b
}

func (b *bpfReplay) check(t *testing.T, s *replay.Snapshot) {
	mapStack(t, s)
	b.cur.p = replay.NewProcess(s, t.TempDir())
	defer b.l.RemoveProcess(b.pid)
	before, err := b.l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	stats := b.l.Stats()
	if _, err := b.l.SyncProcess(b.pid, b.ticks); err != nil {
		t.Fatal(err)
	}
	// A trimmed file keeps the entries of its recorded frames only: one
	// without frames (ld.so, mostly) has no table left.
	withFrames := map[int]bool{}
	for _, f := range s.Frames {
		if m, ok := s.MappingAt(f.PC); ok {
			withFrames[m.File] = true
		}
	}
	st := b.l.Stats()
	if st.OpenErrors+st.BuildErrors+st.MapsErrors != stats.OpenErrors+stats.BuildErrors+stats.MapsErrors || st.Tables != len(withFrames) {
		t.Fatalf("loader: %+v, want a table for each of the %d files with frames", st, len(withFrames))
	}
	w, err := b.r.Walk(s.Regs.PC, s.Regs.SP, s.Regs.BP)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	signals := uint64(0)
	for i, f := range s.Frames {
		if i < 127 {
			want = append(want, f.PC)
			if f.Signal {
				signals++
			}
		}
	}
	if !w.Loaded {
		t.Error("the walk did not use the loaded tables")
	}
	if !slices.Equal(w.PCs, want) {
		t.Errorf("walk\n  %s\ngdb\n  %s", frameList(s, w.PCs), frameList(s, want))
	}
	end := fmt.Sprint(w.End)
	if int(w.End) < len(unwind.EndReasons) {
		end = unwind.EndReasons[w.End]
	}
	if end != s.End {
		t.Errorf("walk ended %s, want %s", end, s.End)
	}
	c, err := b.l.Counters()
	if err != nil {
		t.Fatal(err)
	}
	walks, table := c.Walks-before.Walks, c.FramesTable-before.FramesTable
	other := c.FramesFramePointer + c.FramesUnknownMapping + c.FramesEvictedTable - before.FramesFramePointer - before.FramesUnknownMapping - before.FramesEvictedTable
	if walks != 1 || other != 0 || c.SignalFrames-before.SignalFrames != signals {
		t.Errorf("counters %+v (before %+v): want one walk, every frame from a table row, %d signal frames", c, before, signals)
	}
	t.Logf("%d frames, ended %s; %d from table rows", len(w.PCs), end, table)
}

// current serves the snapshot being replayed to the one loader.
type current struct{ p *replay.Process }

func (c *current) Mappings(pid int) ([]unwind.Mapping, error) { return c.p.Mappings(pid) }

func (c *current) OpenMapping(pid int, m unwind.Mapping) (*procfs.File, error) {
	return c.p.OpenMapping(pid, m)
}

func (c *current) StatMapping(pid int, m unwind.Mapping) (procfs.FileInfo, error) {
	return c.p.StatMapping(pid, m)
}

// frameList prints pcs with the recorded frame names.
func frameList(s *replay.Snapshot, pcs []uint64) string {
	names := map[uint64]string{}
	for _, f := range s.Frames {
		names[f.PC] = f.Fn
	}
	var b strings.Builder
	for i, pc := range pcs {
		if i > 0 {
			b.WriteString("\n  ")
		}
		fmt.Fprintf(&b, "0x%x %s", pc, names[pc])
	}
	return b.String()
}

// mapStack maps the snapshot's stack into this process at its recorded
// address (and zeros up to the end of its mapping), resident, as the walk
// reads it with bpf_probe_read_user, which does not fault pages in.
func mapStack(t *testing.T, s *replay.Snapshot) {
	t.Helper()
	page := uint64(os.Getpagesize())
	lo := s.Stack &^ (page - 1)
	hi := (s.StackEnd + page - 1) &^ (page - 1)
	if hi <= lo || hi-lo > 64<<20 {
		t.Fatalf("stack 0x%x-0x%x", lo, hi)
	}
	addr, _, errno := unix.Syscall6(unix.SYS_MMAP, uintptr(lo), uintptr(hi-lo), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE|unix.MAP_POPULATE, ^uintptr(0), 0)
	if errno != 0 {
		// EEXIST: this process has something there already (its own
		// stack, by the chance of its layout): nothing to replay into.
		t.Fatalf("map the recorded stack at 0x%x-0x%x: %v", lo, hi, errno)
	}
	t.Cleanup(func() { unix.Syscall(unix.SYS_MUNMAP, addr, uintptr(hi-lo), 0) })
	if uint64(addr) != lo {
		t.Fatalf("stack mapped at 0x%x, not 0x%x", addr, lo)
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	// Every page written, so that every page is present.
	if _, err := mem.WriteAt(make([]byte, hi-lo), int64(lo)); err != nil { // #nosec G115 -- a user address, below 2^47
		t.Fatal(err)
	}
	for _, c := range s.StackImage().Chunks {
		if _, err := mem.WriteAt(c.Data, int64(c.Off)); err != nil { // #nosec G115 -- a user address, below 2^47
			t.Fatal(err)
		}
	}
}

// selfStartTicks is field 22 of /proc/self/stat.
func selfStartTicks(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
