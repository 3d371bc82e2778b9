// Package gpu collects NVIDIA GPU metrics through NVML (go-nvml) and
// attributes them to SLURM jobs.
//
// NVML is initialised once in New and shut down once in Close. Poll reads
// every device, MIG instance and GPU process, and swaps in a snapshot of
// metrics; the Collector serves that snapshot to Prometheus, so a scrape
// never calls into NVML (a hung driver cannot hang /metrics, and scrapers
// cannot multiply the load on it).
//
// A job's GPUs come from Slurm (Grants: the device program slurmstepd
// attaches to the job's cgroup, or slurmctld's record), not from whoever
// runs on a GPU and not from the job's environment, which may only narrow
// them; so an allocated but idle GPU is reported as such, and a job cannot
// claim another's. Per-process use comes from NVML and is mapped to jobs
// with the attribution Resolver.
//
// Values NVML does not provide (utilisation of MIG instances, GPM before
// Hopper) are left out, with a slurmscope_gpu_unsupported_info series saying
// so; nothing is estimated.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// ErrNoDriver means there is no usable NVIDIA driver (no libnvidia-ml.so.1,
// or no kernel driver). The agent then runs without GPU metrics.
var ErrNoDriver = errors.New("no NVIDIA driver")

// DefaultInterval is how often Run polls.
const DefaultInterval = 10 * time.Second

// Jobs attributes processes to jobs. *attribution.Resolver implements it.
type Jobs interface {
	// Scan lists every process with its attribution (and forgets the
	// dead); it tells the collector which jobs run on the node.
	Scan() ([]attribution.Process, error)
	// Resolve attributes a GPU process Scan did not list (it started
	// since).
	Resolve(pid int) (attribution.Process, error)
}

// Options configure a Collector.
type Options struct {
	// NVML is the library; nil loads libnvidia-ml through go-nvml from
	// LibraryPath.
	NVML NVML
	// LibraryPath is the NVML library to load; empty means go-nvml's
	// default lookup of libnvidia-ml.so.1.
	LibraryPath string
	// HostName is the host_name label of every series.
	HostName string
	// Interval between polls in Run; default DefaultInterval.
	Interval time.Duration
	// Jobs attributes processes to jobs; nil disables the job series.
	Jobs Jobs
	// Proc reads the tasks' environments; default /proc.
	Proc procfs.FS
	// Grants says which GPU devices Slurm gave each job; nil: no job is
	// known to hold a GPU (the series of their use remain).
	Grants Grants
	// Devices names the GPU device files; defaults /dev and
	// /proc/driver/nvidia-caps/mig-minors.
	Devices Devices
	Log     *slog.Logger
	Now     func() time.Time
}

// Collector polls NVML and serves the last poll as Prometheus metrics.
type Collector struct {
	o    Options
	lib  NVML
	mig  bool // the driver has the MIG entry points
	gpm  bool // ... and the GPM ones
	desc descs

	pollMu sync.Mutex // one poll at a time; guards st and closed
	closed bool
	st     state

	snap promschema.Snapshot
	devs atomic.Pointer[deviceSnapshot] // the last poll's GPUs, for CUDADevice

	cmu          sync.Mutex // guards the counters below
	polls        uint64
	nvmlErrs     map[[2]string]uint64 // (function, error) -> count
	allocErrs    map[string]uint64    // reason -> count
	lastErr      string
	lastGrantErr string
}

// state is carried from one poll to the next.
type state struct {
	lastSeen map[string]uint64       // GPU UUID -> newest process-utilisation sample seen
	gpmOK    map[string]bool         // GPU UUID -> GPM supported (asked once)
	gpm      map[unitKey]*gpmPair    // samples kept between polls
	known    map[int]deviceLabels    // NVML index -> labels, for a GPU that is later lost
	env      map[int]*envEntry       // pid -> what its environment says
	metrics  *nvml.GpmMetricsGetType // reused: it is ~19 KiB
	// noGrant holds the jobs counted as having no known grant;
	// devReported the device files counted as unusable.
	noGrant     map[string]bool
	devReported map[string]bool
}

type deviceLabels struct{ uuid, name string }

type envEntry struct {
	start    uint64
	alloc    taskAlloc
	reported bool // its allocation errors were counted
}

// New loads NVML, initialises it once and checks the driver has every
// entry point a poll may call. It returns an error wrapping ErrNoDriver when
// there is no driver.
func New(o Options) (*Collector, error) {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Proc.Root == "" {
		o.Proc = procfs.New("")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Devices.Root == "" {
		o.Devices.Root = "/dev"
	}
	if o.Devices.MIGMinors == "" {
		o.Devices.MIGMinors = "/proc/driver/nvidia-caps/mig-minors"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.HostName = cleanLabel(o.HostName)
	lib := o.NVML
	if lib == nil {
		var opts []nvml.LibraryOption
		if o.LibraryPath != "" {
			opts = append(opts, nvml.WithLibraryPath(o.LibraryPath))
		}
		lib = nvml.New(opts...)
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w: nvmlInit: %s", ErrNoDriver, retName(ret))
	default:
		return nil, fmt.Errorf("nvmlInit: %s", retName(ret))
	}
	c := &Collector{o: o, lib: lib, mig: true, gpm: true, desc: newDescs(o.HostName),
		nvmlErrs: map[[2]string]uint64{}, allocErrs: map[string]uint64{}}
	c.st = state{lastSeen: map[string]uint64{}, gpmOK: map[string]bool{}, gpm: map[unitKey]*gpmPair{},
		known: map[int]deviceLabels{}, env: map[int]*envEntry{}, metrics: &nvml.GpmMetricsGetType{},
		noGrant: map[string]bool{}, devReported: map[string]bool{}}
	if x := lib.Extensions(); x != nil {
		if miss := missingSymbols(x, requiredSymbols); len(miss) > 0 {
			lib.Shutdown()
			return nil, fmt.Errorf("NVML library lacks %s: driver too old", strings.Join(miss, ", "))
		}
		if miss := missingSymbols(x, migSymbols); len(miss) > 0 {
			c.mig = false
			o.Log.Info("NVML has no MIG support; MIG instances are not reported", "missing", miss)
		}
		if miss := missingSymbols(x, gpmSymbols); len(miss) > 0 {
			c.gpm = false
			o.Log.Info("NVML has no GPM support; SM and Tensor activity are not reported", "missing", miss)
		}
	}
	return c, nil
}

// Close frees what the polls kept and shuts NVML down, once.
func (c *Collector) Close() error {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	for k, p := range c.st.gpm {
		p.free()
		delete(c.st.gpm, k)
	}
	if ret := c.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlShutdown: %s", retName(ret))
	}
	return nil
}

// Run polls every Interval until ctx is done. Poll errors are logged when
// they change, not on every poll.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTicker(c.o.Interval)
	defer t.Stop()
	last := ""
	for {
		if err := c.Poll(ctx); err != nil && ctx.Err() == nil && err.Error() != last {
			last = err.Error()
			c.o.Log.Warn("GPU poll failed", "err", err)
		} else if err == nil {
			last = ""
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ErrClosed is returned by Poll after Close.
var ErrClosed = errors.New("gpu collector closed")

// Poll reads NVML and the jobs once and publishes the result. Trouble with
// one GPU (it fell off the bus, a call failed) is counted and reported as
// that GPU's health; Poll fails only when nothing could be read.
func (c *Collector) Poll(ctx context.Context) error {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	start := c.o.Now()
	p := newPoll(c)
	err := p.run(ctx)
	dur := c.o.Now().Sub(start)
	out := p.out
	out = append(out,
		prometheus.MustNewConstMetric(c.desc.pollDuration, prometheus.GaugeValue, dur.Seconds()),
		prometheus.MustNewConstMetric(c.desc.lastPoll, prometheus.GaugeValue, float64(start.UnixNano())/1e9))
	c.snap.Store(out)
	c.devs.Store(&deviceSnapshot{units: p.units, topo: p.topo})
	c.cmu.Lock()
	c.polls++
	if err != nil {
		c.lastErr = err.Error()
	}
	c.cmu.Unlock()
	return err
}

// Describe sends nothing: the collector is unchecked, because its series'
// label sets depend on the hardware (MIG series carry two more labels than
// whole-GPU series of the same name), which a checked collector forbids.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends the last poll's snapshot and the counters. It never calls
// NVML.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.snap.Collect(ch)
	c.cmu.Lock()
	defer c.cmu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.desc.polls, prometheus.CounterValue, float64(c.polls))
	promschema.CollectCounts(ch, c.desc.nvmlErrors, c.nvmlErrs)
	// Every reason is always exported, so that rate() sees the first one.
	for _, r := range allocReasons {
		ch <- prometheus.MustNewConstMetric(c.desc.allocErrors, prometheus.CounterValue, float64(c.allocErrs[r]), r)
	}
}

// LastError returns the most recent poll error, for a status line.
func (c *Collector) LastError() string {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.lastErr
}

func (c *Collector) countNVML(fn string, ret nvml.Return) {
	c.cmu.Lock()
	c.nvmlErrs[[2]string{fn, retName(ret)}]++
	c.cmu.Unlock()
}

// grantError logs a grant source's error when it differs from the last.
func (c *Collector) grantError(err error) {
	c.cmu.Lock()
	last := c.lastGrantErr
	c.lastGrantErr = err.Error()
	c.cmu.Unlock()
	if err.Error() != last {
		c.o.Log.Warn("reading a job's GPU grant from Slurm", "err", err)
	}
}

func (c *Collector) countAlloc(reason string) {
	c.cmu.Lock()
	c.allocErrs[reason]++
	c.cmu.Unlock()
}

// cleanLabel makes a value from NVML or a process safe as a label value.
func cleanLabel(s string) string { return schema.CleanValue(s, 256) }

// migProfile takes the GPU-instance profile from a MIG device's name, which
// the driver forms as "<GPU name> MIG <profile>", e.g. "NVIDIA H100 80GB
// HBM3 MIG 3g.40gb". A compute instance smaller than its GPU instance is
// named "1c.3g.40gb"; the GPU-instance part is the profile.
func migProfile(name string) string {
	i := strings.LastIndex(name, " MIG ")
	if i < 0 {
		return "unknown"
	}
	p := strings.TrimSpace(name[i+len(" MIG "):])
	if c, rest, ok := strings.Cut(p, "c."); ok {
		if _, err := strconv.Atoi(c); err == nil && rest != "" {
			p = rest
		}
	}
	if p == "" {
		return "unknown"
	}
	return cleanLabel(p)
}
