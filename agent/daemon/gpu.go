package daemon

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/slurmscope/slurmscope/agent/gputrace"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// GPUTracer is the GPU kernel tracer (agent/gputrace in production).
type GPUTracer interface {
	// Attach traces a process once it maps the injection library; it
	// returns gputrace.ErrNotInjected before that, and an error wrapping
	// fs.ErrNotExist when the process is gone.
	Attach(p procfs.ID) error
	Drain() ([]gputrace.Sample, gputrace.Stats, error)
}

// gpuState is what the daemon keeps per process for GPU tracing.
type gpuState struct {
	// pending: profiled processes not attached yet (the library is loaded
	// at CUDA initialisation, after the process was first seen); full
	// rescans try again.
	pending map[procKey]bool
	// env: the GPU variables of attached processes, read while they live.
	env map[procKey]map[string]string
}

// attachGPU attaches a profiled process to the GPU tracer. A process that
// has not loaded the library yet stays pending; one that is gone is
// forgotten; other errors are counted and the process retried.
func (d *Daemon) attachGPU(k procKey) {
	if d.cfg.GPU == nil {
		return
	}
	err := d.cfg.GPU.Attach(procfs.ID{PID: int(k.pid), Start: k.start})
	switch {
	case err == nil:
		// The process maps the library, so it has exec'd its CUDA program:
		// reload its symbols, which may have been read from the shell it
		// was forked as (same pid, same start time).
		d.sym.Forget(procfs.ID{PID: int(k.pid), Start: k.start})
		d.sym.Prepare(procfs.ID{PID: int(k.pid), Start: k.start})
		var env map[string]string
		if d.cfg.Environ != nil && len(d.cfg.GPUEnvKeys) > 0 {
			// Read now: the process has exec'd its CUDA program (it maps
			// the library), so this is the environment its kernels see.
			env, _ = d.cfg.Environ(int(k.pid), d.cfg.GPUEnvKeys...)
		}
		d.knownMu.Lock()
		delete(d.gpu.pending, k)
		if env != nil {
			d.gpu.env[k] = env
		}
		d.knownMu.Unlock()
	case errors.Is(err, gputrace.ErrNotInjected):
		d.knownMu.Lock()
		if d.known[k] { // not forgotten in the meantime
			d.gpu.pending[k] = true
		}
		d.knownMu.Unlock()
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ESRCH):
		d.knownMu.Lock()
		delete(d.gpu.pending, k)
		d.knownMu.Unlock()
	default:
		d.knownMu.Lock()
		if d.known[k] {
			d.gpu.pending[k] = true
		}
		d.knownMu.Unlock()
		d.logOnce("gpu_attach", "attaching the GPU tracer to a process failed", err)
	}
}

// collectGPU drains the GPU tracer into one gpu profile per job, with the
// CPU samples' attribution rules, and returns the processes it saw.
func (d *Daemon) collectGPU(builders map[string]*jobProfile) map[procKey]bool {
	if d.cfg.GPU == nil {
		return nil
	}
	samples, stats, err := d.cfg.GPU.Drain()
	if err != nil {
		// Drain still returns what it joined; only its counters are off.
		d.logOnce("gpu_drain", "draining the GPU tracer failed", err)
	}
	d.m.observeGPU(d.lastGPU, stats)
	d.lastGPU = stats
	seen := make(map[procKey]bool, len(samples))
	for _, s := range samples {
		k := procKey{uint32(s.Proc.PID), s.Proc.Start}
		seen[k] = true
		d.m.gpuTime.Add(float64(s.GPUTime))
		jp := d.profileFor(builders, profiles.GPU, 1, uint32(s.Proc.PID), s.Proc.Start, float64(s.GPUTime), d.m.gpuUnattributed)
		if jp == nil {
			continue
		}
		leaf := symbolize.Frame{Function: s.Kernel}
		if leaf.Function == "" {
			leaf.Function = s.KernelRaw
		}
		var stack []symbolize.Frame
		if s.Unsampled {
			stack = []symbolize.Frame{leaf, {Function: gputrace.UnsampledFrame}}
		} else {
			stack = append([]symbolize.Frame{leaf}, d.sym.User(s.Proc, s.User)...)
		}
		var sl []profiles.Label
		if st := jp.stepOf[k]; st != "" {
			sl = append(sl, profiles.Label{Name: schema.JobStep.Label, Value: st})
		}
		sl = append(sl, d.gpuLabels(k, s.Device)...)
		jp.b.Add(stack, sl, int64(s.Launches), int64(s.GPUTime))
	}
	return seen
}

// gpuLabels names the GPU of a sample, or nothing when that is not known
// for sure.
func (d *Daemon) gpuLabels(k procKey, device uint32) []profiles.Label {
	if d.cfg.GPUDevice == nil || device == gputrace.DeviceUnknown {
		return nil
	}
	d.knownMu.Lock()
	env := d.gpu.env[k]
	d.knownMu.Unlock()
	if env == nil {
		return nil
	}
	return d.cfg.GPUDevice(env, device)
}
