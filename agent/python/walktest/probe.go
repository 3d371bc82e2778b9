// Package walktest runs the CPython walk of agent/python (python.bpf.h) in a
// small BPF program of its own, so that the walk can be tested and measured
// against real interpreters before the CPU sampler and the GPU marker probe
// include it. The program samples cpu-clock events, takes the native user
// stack and the Python frames of the sampled thread, and sends both to user
// space.
package walktest

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/python"
)

// Sample is one cpu-clock sample.
type Sample struct {
	PID, TID      uint32
	StartBoottime uint64   // the leader's start_boottime (ns)
	UserStack     []uint64 // native, innermost first; nil when not taken
	Py            python.RawStack
}

// Probe is the loaded program and its perf events.
type Probe struct {
	objs    walktestObjects
	events  []int
	samples *ringbuf.Reader
	pyev    *ringbuf.Reader
}

// Load loads the program. With emit false it takes the stacks but sends
// nothing (for measuring the BPF time of a sample).
func Load(emit bool) (*Probe, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	spec, err := loadWalktest()
	if err != nil {
		return nil, err
	}
	v := uint32(0)
	if emit {
		v = 1
	}
	if err := spec.Variables["emit"].Set(v); err != nil {
		return nil, err
	}
	p := &Probe{}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("load walktest: %w", err)
	}
	if p.samples, err = ringbuf.NewReader(p.objs.Samples); err != nil {
		p.Close()
		return nil, err
	}
	if p.pyev, err = ringbuf.NewReader(p.objs.PyEvents); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Program is the loaded program (for its run-time statistics).
func (p *Probe) Program() *ebpf.Program { return p.objs.SampleWalk }

// AttachCgroup samples every task of a cgroup v2 directory, and so all its
// descendants, forked ones included, at hz per CPU.
func (p *Probe) AttachCgroup(dir string, hz int) error {
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(cg)
	for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
		if err := p.attach(cg, cpu, hz, unix.PERF_FLAG_PID_CGROUP); err != nil {
			return err
		}
	}
	return nil
}

// AttachPID samples one thread (pid, or a tid) on any CPU.
func (p *Probe) AttachPID(pid, hz int) error { return p.attach(pid, -1, hz, 0) }

func (p *Probe) attach(pid, cpu, hz int, flags int) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(hz),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, pid, cpu, -1, flags|unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("perf_event_open: %w", err)
	}
	p.events = append(p.events, fd)
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, p.objs.SampleWalk.FD()); err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0)
}

// Procs is the program's py_procs map, for a python.Tracker.
func (p *Probe) Procs() python.ProcTable { return procTable{p.objs.PyProcs} }

type procTable struct{ m *ebpf.Map }

func (t procTable) Put(tgid uint32, info python.ProcInfo) error { return t.m.Put(tgid, info) }
func (t procTable) Delete(tgid uint32) error {
	if err := t.m.Delete(tgid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// ReadEvent blocks for the next announced process.
func (p *Probe) ReadEvent() (python.Event, error) {
	var ev python.Event
	rec, err := p.pyev.Read()
	if err != nil {
		return ev, err
	}
	if len(rec.RawSample) < int(unsafe.Sizeof(ev)) {
		return ev, fmt.Errorf("short py_event: %d bytes", len(rec.RawSample))
	}
	ev = *(*python.Event)(unsafe.Pointer(&rec.RawSample[0]))
	return ev, nil
}

// ReadSample blocks for the next sample.
func (p *Probe) ReadSample() (Sample, error) {
	rec, err := p.samples.Read()
	if err != nil {
		return Sample{}, err
	}
	var raw walktestSample
	if len(rec.RawSample) < int(unsafe.Sizeof(raw)) {
		return Sample{}, fmt.Errorf("short sample: %d bytes", len(rec.RawSample))
	}
	raw = *(*walktestSample)(unsafe.Pointer(&rec.RawSample[0]))
	s := Sample{PID: uint32(raw.PidTgid >> 32), TID: uint32(raw.PidTgid), StartBoottime: raw.StartBoottimeNs}
	if raw.UserStackBytes > 0 {
		n := min(int(raw.UserStackBytes)/8, len(raw.UserStack))
		s.UserStack = append([]uint64(nil), raw.UserStack[:n]...)
	}
	s.Py = *(*python.RawStack)(unsafe.Pointer(&raw.Py))
	return s, nil
}

// Stats returns the program's counters summed over CPUs: walks by status
// (indexes python.Status), then dropped samples and truncated stacks.
func (p *Probe) Stats() (byStatus [python.StatusMax]uint64, dropped, truncated uint64, err error) {
	read := func(i uint32) uint64 {
		var per []uint64
		if e := p.objs.Stats.Lookup(i, &per); e != nil {
			err = e
		}
		var t uint64
		for _, v := range per {
			t += v
		}
		return t
	}
	for i := range byStatus {
		byStatus[i] = read(uint32(i))
	}
	return byStatus, read(uint32(python.StatusMax)), read(uint32(python.StatusMax) + 1), err
}

// Close detaches and unloads everything.
func (p *Probe) Close() error {
	for _, fd := range p.events {
		unix.Close(fd)
	}
	p.events = nil
	if p.samples != nil {
		p.samples.Close()
	}
	if p.pyev != nil {
		p.pyev.Close()
	}
	return p.objs.Close()
}

// StartTimeTicks converts a start_boottime in ns to /proc/<pid>/stat field
// 22 (USER_HZ ticks), which the symbolizer takes.
func StartTimeTicks(ns uint64) uint64 { return ns / 1e7 }
