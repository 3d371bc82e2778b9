package unwindtest

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Sample is one stack the probe sent.
type Sample = probeSample

// How a sample's stack was taken (Sample.How).
const (
	HowUnwind       = 1 // the unwinder, from a perf event
	HowFramePointer = 2 // bpf_get_stack, from a perf event
	HowUprobe       = 3 // the unwinder, from a uprobe
)

// Spec returns the probe's collection spec (no privileges needed).
func Spec() (*ebpf.CollectionSpec, error) { return loadProbe() }

// Probe is the loaded probe and what is attached to it.
type Probe struct {
	objs    probeObjects
	events  []int
	links   []link.Link
	reader  *ringbuf.Reader
	mu      sync.Mutex
	samples []Sample
	done    chan struct{}
}

// Load loads the probe for the process tgid. replace returns the map
// replacements (agent/unwind's Maps.Replace) for the spec.
func Load(tgid int, replace func(*ebpf.CollectionSpec) (map[string]*ebpf.Map, error)) (*Probe, error) {
	spec, err := loadProbe()
	if err != nil {
		return nil, err
	}
	target := uint32(tgid) // #nosec G115 -- a test's own pid, at most pid_max (2^22)
	if err := spec.Variables["target_tgid"].Set(target); err != nil {
		return nil, err
	}
	repl, err := replace(spec)
	if err != nil {
		return nil, err
	}
	p := &Probe{done: make(chan struct{})}
	if err := spec.LoadAndAssign(&p.objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%+v", ve)
		}
		return nil, err
	}
	if p.reader, err = ringbuf.NewReader(p.objs.Samples); err != nil {
		p.objs.Close()
		return nil, err
	}
	go p.read()
	return p, nil
}

func (p *Probe) read() {
	defer close(p.done)
	for {
		rec, err := p.reader.Read()
		if err != nil {
			return
		}
		if len(rec.RawSample) < int(unsafe.Sizeof(Sample{})) {
			continue
		}
		s := *(*Sample)(unsafe.Pointer(&rec.RawSample[0]))
		p.mu.Lock()
		p.samples = append(p.samples, s)
		p.mu.Unlock()
	}
}

// AttachPerf samples the thread pid at hz on the cpu-clock event, with the
// unwinder or (fp) bpf_get_stack.
func (p *Probe) AttachPerf(pid int, hz uint64, fp bool) error {
	prog := p.objs.SampleUnwind
	if fp {
		prog = p.objs.SampleFp
	}
	attr := unix.PerfEventAttr{
		Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: hz,
		Bits: unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, pid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("perf_event_open: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
		unix.Close(fd)
		return err
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		unix.Close(fd)
		return err
	}
	p.events = append(p.events, fd)
	return nil
}

// AttachUprobe attaches the unwinding uprobe to a symbol of an executable.
func (p *Probe) AttachUprobe(exe, symbol string) error {
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		return err
	}
	l, err := ex.Uprobe(symbol, p.objs.UprobeUnwind, nil)
	if err != nil {
		return err
	}
	p.links = append(p.links, l)
	return nil
}

// Detach stops all sampling; samples already sent stay readable.
func (p *Probe) Detach() {
	for _, fd := range p.events {
		unix.Close(fd)
	}
	p.events = nil
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
}

// Samples returns the samples received so far.
func (p *Probe) Samples() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Sample(nil), p.samples...)
}

// Programs returns the unwinding and the frame-pointer perf programs, for
// their run-time statistics.
func (p *Probe) Programs() (unwind, fp *ebpf.Program) { return p.objs.SampleUnwind, p.objs.SampleFp }

// Close detaches and unloads the probe.
func (p *Probe) Close() {
	p.Detach()
	p.reader.Close()
	<-p.done
	p.objs.Close()
}
