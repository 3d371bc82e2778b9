package stackwalk

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// interpreters are the instances of the enabled interpreters, by kind.
type interpreters struct {
	names  []string
	byKind map[uint32]interp.Instance
	mask   uint32 // stack_interpreters: bit 1 << kind for each
}

// openInterpreters opens each interpreter with the capture's environment
// and its own view of the process table.
func openInterpreters(list []interp.Interpreter, env interp.Env, table kindTable) (*interpreters, error) {
	s := &interpreters{byKind: map[uint32]interp.Instance{}}
	for _, in := range list {
		k := uint32(in.Kind())
		if in.Kind() == 0 || in.Kind() > interp.MaxKind {
			return nil, fmt.Errorf("interpreter %s: kind %d out of range 1..%d", in.Name(), k, interp.MaxKind)
		}
		if _, dup := s.byKind[k]; dup {
			return nil, fmt.Errorf("interpreter %s: kind %d taken by another", in.Name(), k)
		}
		e := env
		table.kind = k
		e.Procs = table
		inst, err := in.Open(e)
		if err != nil {
			return nil, fmt.Errorf("interpreter %s: %w", in.Name(), err)
		}
		s.byKind[k] = inst
		s.names = append(s.names, in.Name())
		s.mask |= 1 << k
	}
	return s, nil
}

// of returns the instance of kind, or nil.
func (s *interpreters) of(kind uint32) interp.Instance {
	if s == nil {
		return nil
	}
	return s.byKind[kind]
}

// announce hands a process that has no interpreter entry to every
// interpreter; false when there is none.
func (s *interpreters) announce(p interp.Process) bool {
	if s == nil || len(s.byKind) == 0 {
		return false
	}
	for _, in := range s.byKind {
		in.Announce(p)
	}
	return true
}

// retry reports whether any interpreter still waits for a process.
func (s *interpreters) retry() bool {
	pending := false
	for _, in := range s.all() {
		pending = in.Retry() || pending
	}
	return pending
}

func (s *interpreters) forget(id procfs.ID) {
	for _, in := range s.all() {
		in.Forget(id)
	}
}

func (s *interpreters) all() map[uint32]interp.Instance {
	if s == nil {
		return nil
	}
	return s.byKind
}

func (s *interpreters) collectors() []prometheus.Collector {
	var out []prometheus.Collector
	for _, in := range s.all() {
		out = append(out, in.Collectors()...)
	}
	return out
}

// interpProcess is a process as the interpreters name it.
func interpProcess(id procfs.ID, startNs, mm uint64) interp.Process {
	return interp.Process{PID: uint32(id.PID), StartNs: startNs, MM: mm} // #nosec G115 -- from a stack_event's u32 tgid
}

func (ev procEvent) process() interp.Process { return interpProcess(ev.id, ev.startNs, ev.mm) }

// kindTable is interp_procs as one interpreter writes it.
type kindTable struct {
	m     *ebpf.Map
	kind  uint32
	proc  procfs.FS
	owner func(procfs.ID) string // nil: no job groups
}

// group is the job group of an entry (interp_proc.group): the owner's
// hash, never 0, which means none.
func (t kindTable) group(p interp.Process) uint32 { return jobGroup(t.owner, p.ID()) }

// jobGroup is the job group of process id (interp_proc.group,
// unwind_proc.group): its owner's hash, never 0, which means none.
func jobGroup(owner func(procfs.ID) string, id procfs.ID) uint32 {
	if owner == nil {
		return 0
	}
	o := owner(id)
	if o == "" {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(o))
	return h.Sum32() | 1
}

var _ interp.Table = kindTable{}

// Put writes p's entry, unless p has exited: the exit hook frees the entry
// of a process whose last thread exits after the write, and Put the entry
// of one that exited before it (a short child set up as it exits, a
// zombie), so that neither stays in the shared table.
//
// An entry the fork hook gave the same process keeps its origin and its
// count of forks: the exit hook gives the origin's place back through it,
// and a forked Python that execs another Python (subprocess.run) would
// otherwise keep that place for good.
func (t kindTable) Put(p interp.Process, data []byte) error {
	v := bpf.InterpProc{StartBoottime: p.StartNs, Mm: p.MM, Kind: t.kind, Group: t.group(p)}
	if len(data) > len(v.Data) {
		return fmt.Errorf("interpreter data of %d bytes, the table holds %d", len(data), len(v.Data))
	}
	copy(v.Data[:], data)
	var old bpf.InterpProc
	if t.m.Lookup(p.PID, &old) == nil && old.StartBoottime == p.StartNs {
		v.Origin, v.Forks = old.Origin, old.Forks
	}
	if err := t.m.Put(p.PID, v); err != nil {
		return err
	}
	// An exiting process (PF_EXITING, a zombie) has run, or is running,
	// its exit hook: the entry goes, whatever it holds.
	if st, err := t.proc.Stat(int(p.PID)); err != nil || st.StartTime != p.ID().Start || st.Exiting() {
		t.remove(p.PID)
		return fmt.Errorf("process %d: %w", p.PID, procfs.ErrGone)
	}
	return nil
}

// Delete drops pid's entry, unless the fork hook made it: that one holds
// a place of its origin's share, which only the exec and exit hooks give
// back (they free it, or clear its origin). Left, it names an image no
// sample runs until then.
func (t kindTable) Delete(pid uint32) error {
	var old bpf.InterpProc
	if t.m.Lookup(pid, &old) == nil && old.Origin != 0 {
		return nil
	}
	return t.remove(pid)
}

func (t kindTable) remove(pid uint32) error {
	if err := t.m.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// mapsReader and opener are procfs as agent/interp's narrow interfaces.
type mapsReader struct{ m procfs.Mapped }

func (r mapsReader) Maps(pid int) ([]procfs.Mapping, error) { return r.m.Mappings(pid) }

type opener struct{ m procfs.Mapped }

func (o opener) OpenMapped(pid int, m procfs.Mapping) (interp.File, error) {
	f, err := o.m.OpenMapping(pid, m)
	if err != nil {
		return nil, err
	}
	return mappedFile{r: f.Reader(), f: f}, nil
}

func (o opener) StatMapped(pid int, m procfs.Mapping) (procfs.FileInfo, error) {
	return o.m.StatMapping(pid, m)
}

// mappedFile reads a mapped file only up to the size procfs checked.
type mappedFile struct {
	r *io.SectionReader
	f *procfs.File
}

func (p mappedFile) ReadAt(b []byte, off int64) (int, error) { return p.r.ReadAt(b, off) }
func (p mappedFile) Close() error                            { return p.f.Close() }
func (p mappedFile) Stat() (fs.FileInfo, error)              { return p.f.Stat() }

var (
	_ interp.MapsReader = mapsReader{}
	_ interp.Opener     = opener{}
)
