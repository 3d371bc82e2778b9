// Package hostmetrics reads the host side of each SLURM job on the node
// from the cgroups Slurm made for it: CPU time, allocated CPUs, memory
// used, peak and limit, OOM kills and block I/O, for the job's own cgroup
// and for each step's (cgroup v2 and v1; see schema.HostMetrics).
//
// Like the GPU collector it polls on its own interval and serves the last
// poll: a scrape reads no file, and the collector runs on its own goroutine,
// taking the attribution resolver's lock only to copy the jobs' cgroup
// paths, so it never holds up the profiler. Files are read through
// procfs.ReadFileBeneath (bounded, non-blocking, no link followed).
//
// A quantity a job's cgroup does not provide (a controller Slurm did not
// enable or constrain for it) is left out, with one
// slurmscope_job_cgroup_unsupported_info series naming it, never a zero.
package hostmetrics

import (
	"context"
	"errors"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// DefaultInterval is how often Run polls.
const DefaultInterval = 10 * time.Second

// Jobs says which jobs run on the node and where their cgroups are.
// *attribution.Resolver implements it.
type Jobs interface {
	// Refresh attributes processes started since the last call, so that
	// the collector finds new jobs even where nothing else rescans.
	Refresh() ([]attribution.Process, error)
	JobCgroups() []attribution.JobCgroup
}

var _ Jobs = (*attribution.Resolver)(nil)

// Options configure a Collector.
type Options struct {
	// Root is the cgroup root (/sys/fs/cgroup): the unified hierarchy at
	// it or at unified/, v1 controllers at <Root>/<controller>.
	Root string
	// HostName is the host_name of the collector's own series. A job's
	// carry the node its cgroup path names (several slurmd on one host),
	// as its profiles do; Jobs leaves out other slurmd's jobs when the
	// agent serves one node.
	HostName string
	Jobs     Jobs
	Interval time.Duration
	Log      *slog.Logger
	Now      func() time.Time
}

// Collector polls the jobs' cgroups and serves the last poll.
type Collector struct {
	o    Options
	desc descs

	pollMu sync.Mutex
	snap   promschema.Snapshot

	cmu      sync.Mutex // guards the counters and the log-once sets
	polls    uint64
	errs     map[[2]string]uint64 // (file, reason) -> count
	loggedU  map[string]bool      // unsupported metrics logged
	loggedE  map[[2]string]bool   // read errors logged
	lastPoll error
}

type descs struct {
	job, step                       [nMetrics]*prometheus.Desc
	typ                             [nMetrics]prometheus.ValueType
	lastSeen, unsupported           *prometheus.Desc
	pollDuration, polls, readErrors *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector; it reads nothing until Poll.
func New(o Options) *Collector {
	if o.Root == "" {
		o.Root = "/sys/fs/cgroup"
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Collector{o: o, errs: map[[2]string]uint64{}, loggedU: map[string]bool{}, loggedE: map[[2]string]bool{}}
	d := func(m schema.Metric) *prometheus.Desc { return promschema.Desc(m, o.HostName, false) }
	// Per job: host_name is the job's node, a label like the others.
	jd := func(m schema.Metric) *prometheus.Desc {
		return prometheus.NewDesc(m.Name, m.Help, m.LabelNames(false), nil)
	}
	for i, h := range schema.HostMetrics {
		c.desc.job[i], c.desc.step[i], c.desc.typ[i] = jd(h.Job), jd(h.Step), promschema.ValueType(h.Job)
	}
	c.desc.lastSeen = jd(schema.JobLastSeen)
	c.desc.unsupported = jd(schema.JobCgroupUnsupported)
	c.desc.pollDuration = d(schema.CgroupPollDuration)
	c.desc.polls = d(schema.CgroupPolls)
	c.desc.readErrors = d(schema.CgroupReadErrors)
	return c
}

// Run polls every Interval until ctx is done.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTicker(c.o.Interval)
	defer t.Stop()
	for {
		c.Poll(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Poll reads every job's cgroups once and publishes the result. A job
// whose cgroup vanished meanwhile (it ended) is left out; trouble with
// one file is counted and leaves out only its series.
func (c *Collector) Poll(ctx context.Context) {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	start := c.o.Now()
	var refreshErr error
	if c.o.Jobs != nil {
		_, refreshErr = c.o.Jobs.Refresh()
	}
	r := &reader{l: discover(c.o.Root), fail: c.fail}
	var out []prometheus.Metric
	if c.o.Jobs != nil {
		for _, jc := range c.o.Jobs.JobCgroups() {
			if ctx.Err() != nil {
				break
			}
			if jc.Job == nil {
				continue
			}
			out = append(out, c.job(r, jc, start)...)
		}
	}
	out = append(out, prometheus.MustNewConstMetric(c.desc.pollDuration, prometheus.GaugeValue, c.o.Now().Sub(start).Seconds()))
	c.snap.Store(out)
	c.cmu.Lock()
	c.polls++
	if refreshErr != nil && (c.lastPoll == nil || c.lastPoll.Error() != refreshErr.Error()) {
		c.o.Log.Warn("host metrics: listing processes failed", "err", refreshErr)
	}
	c.lastPoll = refreshErr
	c.cmu.Unlock()
}

// job reads one job's cgroup and its steps' and returns their series.
func (c *Collector) job(r *reader, jc attribution.JobCgroup, now time.Time) []prometheus.Metric {
	r.owner = jc.Job.UID
	steps, base, ok := c.steps(r, jc)
	if !ok {
		return nil // gone, or unreadable (counted)
	}
	var js sample
	var stepSamples []sample
	switch jc.Version {
	case 2:
		constrained, missing := r.cpusetConstrained(jc.Dir)
		js = r.v2(jc.Dir, constrained)
		js.missing[mCPUs] = js.missing[mCPUs] || missing || !constrained
		for _, st := range steps {
			stepSamples = append(stepSamples, r.v2(st.dir, constrained))
		}
	case 1:
		js = r.v1(jc.Dir, 2)
		for _, st := range steps {
			stepSamples = append(stepSamples, r.v1(st.dir, 1))
		}
	default:
		return nil
	}
	// A job that ended while it was read would look unsupported.
	if _, err := procfs.ReadDirBeneath(base, jc.Dir, maxSteps, r.owner); removed(err) {
		return nil
	}
	j := jc.Job
	// The schema's order: host_name first.
	labels := []string{j.Host, j.ID, j.User, j.Name}
	var out []prometheus.Metric
	for m := 0; m < nMetrics; m++ {
		switch {
		case js.have[m]:
			out = append(out, prometheus.MustNewConstMetric(c.desc.job[m], c.desc.typ[m], js.v[m], labels...))
		case js.missing[m]:
			name := schema.HostMetrics[m].Job.Name
			out = append(out, prometheus.MustNewConstMetric(c.desc.unsupported, prometheus.GaugeValue, 1, append(slices.Clone(labels), name)...))
			c.logUnsupported(name, jc.Version)
		}
	}
	for i, st := range steps {
		sl := append(slices.Clone(labels), st.step)
		for m := 0; m < nMetrics; m++ {
			if stepSamples[i].have[m] {
				out = append(out, prometheus.MustNewConstMetric(c.desc.step[m], c.desc.typ[m], stepSamples[i].v[m], sl...))
			}
		}
	}
	out = append(out, prometheus.MustNewConstMetric(c.desc.lastSeen, prometheus.GaugeValue, float64(now.UnixNano())/1e9, labels...))
	return out
}

type step struct{ dir, step string }

// steps lists the job's step directories, from the first hierarchy that
// has the job's directory, which it returns. ok is false when none has it:
// the job ended.
func (c *Collector) steps(r *reader, jc attribution.JobCgroup) (_ []step, base string, ok bool) {
	var bases []string
	if jc.Version == 2 {
		bases = []string{r.l.v2}
	} else {
		for _, ctl := range v1Controllers {
			bases = append(bases, r.l.v1[ctl])
		}
	}
	jl, isJob, err := cgroup.ParsePath(jc.Dir, jc.Version)
	if !isJob || err != nil || jl.Step != "" {
		return nil, "", false
	}
	for _, base := range bases {
		if base == "" {
			continue
		}
		names, err := procfs.ReadDirBeneath(base, jc.Dir, maxSteps, r.owner)
		if removed(err) {
			continue
		}
		if err != nil {
			c.fail("steps", reasonOf(err), err)
			return nil, "", false
		}
		var out []step
		for _, n := range names {
			dir := path.Join(jc.Dir, n)
			// Only Slurm's step directories, by the parser's rules.
			if sl, ok, err := cgroup.ParsePath(dir, jc.Version); ok && err == nil && sl.Step != "" && sl.JobKey() == jl.JobKey() && sl.StepDir() == dir {
				out = append(out, step{dir, sl.Step})
			}
		}
		slices.SortFunc(out, func(a, b step) int { return strings.Compare(a.step, b.step) })
		return out, base, true
	}
	return nil, "", false
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, procfs.ErrTooLarge):
		return "too_large"
	case errors.Is(err, procfs.ErrNotDir), errors.Is(err, procfs.ErrOwner), errors.Is(err, procfs.ErrLink), errors.Is(err, procfs.ErrNotRegular):
		return "refused"
	}
	return "unreadable"
}

func (c *Collector) fail(file, reason string, err error) {
	k := [2]string{file, reason}
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.errs[k]++
	if !c.loggedE[k] {
		c.loggedE[k] = true
		c.o.Log.Warn("host metrics: a job's cgroup file is left out (logged once per file and reason)", "file", file, "reason", reason, "err", err)
	}
}

func (c *Collector) logUnsupported(metric string, version int) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.loggedU[metric] {
		return
	}
	c.loggedU[metric] = true
	c.o.Log.Info("host metrics: jobs' cgroups do not provide a metric (controller not enabled by Slurm); it is reported as unsupported",
		"metric", metric, "cgroup", version)
}

// Describe sends nothing: the collector is unchecked, as its families
// depend on the jobs running.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect sends the last poll and the counters. It reads no file.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.snap.Collect(ch)
	c.cmu.Lock()
	defer c.cmu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.desc.polls, prometheus.CounterValue, float64(c.polls))
	promschema.CollectCounts(ch, c.desc.readErrors, c.errs)
}
