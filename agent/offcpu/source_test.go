package offcpu

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/source"
)

// fakeTracer records the jobs added and removed, and drains what it holds.
type fakeTracer struct {
	samples []Sample
	stats   Stats
	added   map[uint64]bool
	removed []uint64
	addErr  error
	onAdd   func(id uint64, group uint32)
}

func (f *fakeTracer) Drain() ([]Sample, Stats, error) {
	s := f.samples
	f.samples = nil
	return s, f.stats, nil
}

func (f *fakeTracer) AddJob(id uint64, v1 bool, group uint32) error {
	if f.addErr != nil {
		return f.addErr
	}
	if group == 0 {
		return errors.New("group 0")
	}
	if f.added == nil {
		f.added = map[uint64]bool{}
	}
	f.added[id] = v1
	if f.onAdd != nil {
		f.onAdd(id, group)
	}
	return nil
}

func (f *fakeTracer) RemoveJob(id uint64, v1 bool) error {
	f.removed = append(f.removed, id)
	delete(f.added, id)
	return nil
}

// TestDrainKeepsBlockedAndRunnableApart: a blocked switch's time is the
// blocked value, a runnable one's the runnable value; the tracepoint's
// frames up to the scheduler's entry are cut.
func TestDrainKeepsBlockedAndRunnableApart(t *testing.T) {
	p := procfs.ID{PID: 7, Start: 1}
	f := &fakeTracer{samples: []Sample{
		{Proc: p, Kernel: []uint64{0x10, 0x21, 0x500, 0x600}, User: []uint64{0x1}, Switches: 3, Ns: 3000},
		{Proc: p, Kernel: []uint64{0x500}, Runnable: true, Switches: 1, Ns: 50},
	}, stats: Stats{SampledOut: 4}}
	s := NewSource(f, nil, nil, "", "")
	s.trim = addrRange{start: 0x20, end: 0x30} // the return address 0x21 is in it
	b, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	want := []source.Sample{
		{Proc: p, Kernel: []uint64{0x500, 0x600}, User: []uint64{0x1}, Values: []int64{3, 0, 3000}},
		{Proc: p, Kernel: []uint64{0x500}, Values: []int64{1, 50, 0}},
	}
	if !reflect.DeepEqual(b.Samples, want) {
		t.Errorf("samples %+v, want %+v", b.Samples, want)
	}
	if info := s.Info(); info.Type.Name != "off_cpu" || len(info.Type.SampleTypes) != 3 || info.Type.SampleTypes[1].Type != "runnable" {
		t.Errorf("info %+v", info)
	}
}

// TestTrimKeepsAStackWithoutTheEntry: a kernel stack that never passes the
// scheduler's entry (or no entry known) is kept whole.
func TestTrimKeepsAStackWithoutTheEntry(t *testing.T) {
	s := NewSource(&fakeTracer{}, nil, nil, "", "")
	k := []uint64{0x100, 0x200}
	if got := s.trimKernel(k); !reflect.DeepEqual(got, k) {
		t.Errorf("no entry known: %v", got)
	}
	s.trim = addrRange{start: 0x20, end: 0x30}
	if got := s.trimKernel(k); !reflect.DeepEqual(got, k) {
		t.Errorf("entry not in the stack: %v", got)
	}
}

// TestTaskCgroupsAreAddedOnceAndDroppedWhenGone: the task cgroup of each
// profiled process is added once, in its hierarchy, with its job's group;
// a v1 one only when a v1 controller is traced; slurmstepd (which the
// lookup answers false for) is not; a cgroup that is gone is removed at
// the next drain.
func TestTaskCgroupsAreAddedOnceAndDroppedWhenGone(t *testing.T) {
	root := t.TempDir()
	v2 := filepath.Join(root, "unified")
	t0, t1 := "/s/job_1/step_0/user/task_0", "/s/job_1/step_0/user/task_1"
	t2, t3 := "/s/job_2/step_0/user/task_0", "/slurm/uid_0/job_3/step_0/task_0"
	for _, d := range []string{filepath.Join(v2, t0), filepath.Join(v2, t1), filepath.Join(v2, t2), filepath.Join(root, "freezer", t3)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tasks := map[int]struct {
		v         int
		task, job string
	}{1: {2, t0, "/s/job_1"}, 2: {2, t0, "/s/job_1"}, 3: {2, t1, "/s/job_1"}, 4: {2, t2, "/s/job_2"}, 5: {1, t3, "/slurm/uid_0/job_3"},
		6: {2, "", "/s/job_1"}} // slurmstepd
	lookup := func(p procfs.ID) (int, string, string, bool) {
		j, ok := tasks[p.PID]
		return j.v, j.task, j.job, ok
	}
	f := &fakeTracer{}
	s := NewSource(f, nil, lookup, root, "")
	groups := map[uint64]uint32{}
	f.onAdd = func(id uint64, group uint32) { groups[id] = group }
	for pid := 1; pid <= 7; pid++ {
		want := source.AttachDone
		if pid == 6 {
			want = source.AttachRetry // a task may yet leave slurmstepd's cgroup
		}
		if res, err := s.AttachProcess(procfs.ID{PID: pid}); err != nil || res != want {
			t.Fatalf("pid %d: %v %v", pid, res, err)
		}
	}
	id := func(dir string) uint64 {
		n, err := cgroupID(dir)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	i0, i1, i2 := id(filepath.Join(v2, t0)), id(filepath.Join(v2, t1)), id(filepath.Join(v2, t2))
	if len(f.added) != 3 || groups[i0] != groups[i1] || groups[i0] == groups[i2] {
		t.Fatalf("added %v, groups %v: want job 1's two tasks in one group, job 2's task in another (v1 is not traced)", f.added, groups)
	}
	s.v1 = "freezer"
	s.AttachProcess(procfs.ID{PID: 5})
	if v1, ok := f.added[id(filepath.Join(root, "freezer", t3))]; !ok || !v1 {
		t.Fatalf("added %v: want job_3's task in the freezer, as v1", f.added)
	}
	if err := os.Remove(filepath.Join(v2, t1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Drain(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.removed, []uint64{i1}) || len(f.added) != 3 {
		t.Errorf("removed %v (want %d), left %v", f.removed, i1, f.added)
	}
}

// TestAddJobFailureRetries: a cgroup the tracer could not add is asked for
// again.
func TestAddJobFailureRetries(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "s", "job_1", "task_0"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "cgroup.controllers"), nil, 0o644) // a pure v2 root
	f := &fakeTracer{addErr: errors.New("map full")}
	s := NewSource(f, nil, func(procfs.ID) (int, string, string, bool) { return 2, "/s/job_1/task_0", "/s/job_1", true }, root, "")
	if res, err := s.AttachProcess(procfs.ID{PID: 1}); err == nil || res != source.AttachRetry {
		t.Fatalf("%v %v, want a retry", res, err)
	}
	f.addErr = nil
	if res, err := s.AttachProcess(procfs.ID{PID: 1}); err != nil || res != source.AttachDone || len(f.added) != 1 {
		t.Fatalf("%v %v %v", res, err, f.added)
	}
}

// TestV1Controller: the first of the controllers Slurm's jobs are in that
// is mounted as v1 at its name, and its index in /proc/cgroups.
func TestV1Controller(t *testing.T) {
	proc := t.TempDir()
	root := t.TempDir()
	os.WriteFile(filepath.Join(proc, "cgroups"), []byte("#subsys_name\thierarchy\tnum_cgroups\tenabled\n"+
		"cpuset\t3\t1\t1\ncpu\t1\t1\t1\ncpuacct\t2\t1\t1\nmemory\t4\t1\t1\ndevices\t5\t1\t1\nfreezer\t6\t1\t1\n"), 0o644)
	fs := procfs.New(proc)
	if c, id := v1Controller(fs, root); c != "" || id != -1 {
		t.Errorf("nothing mounted: %q %d", c, id)
	}
	os.MkdirAll(filepath.Join(root, "memory"), 0o755)
	os.MkdirAll(filepath.Join(root, "freezer"), 0o755)
	os.WriteFile(filepath.Join(root, "freezer", "cgroup.controllers"), nil, 0o644) // a v2 mount there
	if c, id := v1Controller(fs, root); c != "memory" || id != 3 {
		t.Errorf("got %q %d, want memory 3", c, id)
	}
	os.Remove(filepath.Join(root, "freezer", "cgroup.controllers"))
	if c, id := v1Controller(fs, root); c != "freezer" || id != 5 {
		t.Errorf("got %q %d, want freezer 5", c, id)
	}
}

// TestSchedEntry reads __schedule's range from kallsyms; hidden addresses
// give none.
func TestSchedEntry(t *testing.T) {
	proc := t.TempDir()
	os.WriteFile(filepath.Join(proc, "kallsyms"), []byte("ffffffff81000000 T _stext\nffffffff81a00010 t __schedule\nffffffff81a00900 T schedule\n"), 0o644)
	if r := schedEntry(procfs.New(proc)); r.start != 0xffffffff81a00010 || r.end != 0xffffffff81a00900 {
		t.Errorf("%x", r)
	}
	os.WriteFile(filepath.Join(proc, "kallsyms"), []byte("0000000000000000 T _stext\n0000000000000000 t __schedule\n0000000000000000 T schedule\n"), 0o644)
	if r := schedEntry(procfs.New(proc)); r != (addrRange{}) {
		t.Errorf("hidden: %x", r)
	}
}

// TestObjectLayout: the committed object keeps the layout the Go side
// decodes; a C edit that breaks it without regenerating fails here,
// without root.
func TestObjectLayout(t *testing.T) {
	spec, err := loadOffcpu()
	if err != nil {
		t.Fatal(err)
	}
	key, val := unsafe.Sizeof(offcpuCountKey{}), unsafe.Sizeof(offcpuCountVal{})
	if key != 48 || val != 16 {
		t.Errorf("count key/value are %d/%d bytes, want 48/16", key, val)
	}
	for _, name := range []string{offcpuMapCounts0, offcpuMapCounts1} {
		if m := spec.Maps[name]; m.KeySize != uint32(key) || m.ValueSize != uint32(val) {
			t.Errorf("%s: key/value %d/%d bytes, Go has %d/%d", name, m.KeySize, m.ValueSize, key, val)
		}
	}
	// Stacks outlive generations: least recently used go first.
	for _, name := range []string{offcpuMapStacks, offcpuMapInterpStacks} {
		if m := spec.Maps[name]; m.Type != ebpf.LRUHash || m.KeySize != 8 {
			t.Errorf("%s: %s, key %d bytes; want an LRU hash keyed by the stack's hash", name, m.Type, m.KeySize)
		}
	}
	if err := bpf.LayoutMatches(spec, "interp_new_event", bpf.InterpNewEvent{}); err != nil {
		t.Error(err)
	}
	if err := bpf.LayoutMatches(spec, "unwind_stack", bpf.UnwindStack{}); err != nil {
		t.Error(err)
	}
}

// TestV1WithoutTaskDirectories: a v1 controller with step directories
// only (the freezer) has the step traced, its nearest directory, never
// more than the job's.
func TestV1WithoutTaskDirectories(t *testing.T) {
	root := t.TempDir()
	step := filepath.Join(root, "slurm", "uid_0", "job_3", "step_0")
	if err := os.MkdirAll(step, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := existing(filepath.Join(step, "task_0"), filepath.Join(root, "slurm", "uid_0", "job_3")); got != step {
		t.Errorf("existing = %s, want the step %s", got, step)
	}
	job := filepath.Join(root, "slurm", "uid_0", "job_9")
	if got := existing(filepath.Join(job, "step_0", "task_0"), job); got != job {
		t.Errorf("nothing below the job: %s, want the job's %s", got, job)
	}
}
