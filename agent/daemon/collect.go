package daemon

// Collection: each interval, every source drained, each sample
// attributed, symbolised and spliced, one profile per job and type.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// Collect drains every source and writes one profile per job and profile
// type. A source that fails to drain keeps its interval for the next
// Collect; the others are written, and the failure is returned.
func (d *Daemon) Collect(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	began := time.Now()
	end := d.cfg.Now()
	var outs []Output
	var errs []error
	seen := map[procfs.ID]bool{}
	iv := newInterval(d.srcs)
	for _, s := range d.srcs {
		b, err := s.Drain()
		if err != nil {
			errs = append(errs, fmt.Errorf("draining the %s source: %w", s.info.Name, err))
			continue
		}
		if b.Warn != nil {
			d.logError(s.info.Name+"_drain", "draining the "+s.info.Name+" source", b.Warn)
		}
		builders := map[string]*jobProfile{}
		n := iv.of(s)
		for i := range b.Samples {
			smp := &b.Samples[i]
			if d.add(builders, s, smp) {
				n.profiled += smp.Values[0]
			} else {
				n.others += smp.Values[0]
			}
			seen[smp.Proc] = true
		}
		outs = d.finish(outs, builders, s.start, end)
		s.start = end
	}
	// After every source: a process seen by any of them stays known.
	d.forgetExited(seen)
	delivered := true
	if len(outs) > 0 {
		if err := d.sink.Write(ctx, outs); err != nil {
			d.m.profiles.WithLabelValues("error").Add(float64(len(outs)))
			errs = append(errs, fmt.Errorf("writing profiles: %w", err))
			delivered = false
		} else {
			d.m.profiles.WithLabelValues("ok").Add(float64(len(outs)))
		}
	}
	// The heartbeat: a source that failed to drain keeps its interval for
	// the next Collect and is counted; the loop still delivered this one.
	if delivered {
		d.delivered.Store(end.UnixNano())
	}
	iv.add(outs)
	d.logInterval(iv, time.Since(began))
	return logx.Join(errs...)
}

// add attributes, symbolises and adds one sample of source s; false when
// it is unattributed (counted, and in no profile).
func (d *Daemon) add(builders map[string]*jobProfile, s *src, smp *source.Sample) bool {
	count := float64(smp.Values[s.info.Counted])
	s.info.Drained.Add(count)
	jp := d.profileFor(builders, s, smp.Proc, count)
	if jp == nil {
		return false
	}
	stack := append([]symbolize.Frame(nil), smp.Frames...)
	if len(smp.Kernel) > 0 {
		stack = append(stack, d.sym.Kernel(smp.Kernel)...)
	}
	spliced := len(smp.Interp.Frames) > 0 || len(smp.Interp.Root) > 0
	if len(smp.User) > 0 || spliced {
		var user []symbolize.Frame
		if len(smp.User) > 0 {
			user = d.sym.User(smp.Proc, smp.User)
		}
		// The one place interpreter frames join the native ones,
		// whichever source captured them: each eval-loop frame becomes
		// the frames it ran, and root frames (NVTX ranges) go at the
		// root.
		if spliced {
			user = interp.Splice(user, smp.Interp)
		}
		stack = append(stack, user...)
	}
	// The step and the task are sample labels: one profile per job, while
	// Pyroscope still splits series by them.
	sl := append([]profiles.Label(nil), jp.procLabels[smp.Proc]...)
	sl = append(sl, smp.Labels...)
	if d.cfg.LabelStackSetup {
		sl = append(sl, profiles.Label{Name: schema.StackSetupLabel, Value: smp.Setup.String()})
	}
	jp.b.Add(stack, sl, smp.Values...)
	return true
}

// finish encodes the builders' profiles, in job order, onto outs.
func (d *Daemon) finish(outs []Output, builders map[string]*jobProfile, start, end time.Time) []Output {
	keys := make([]string, 0, len(builders))
	for k := range builders {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		jp := builders[k]
		// A file on disk names its step too, when there is only one.
		labels := append([]profiles.Label(nil), jp.labels...)
		if len(jp.steps) == 1 {
			for st := range jp.steps {
				labels = append(labels, profiles.Label{Name: schema.JobStep.Label, Value: st})
			}
		}
		p := jp.b.Finish(end, labels)
		data, err := profiles.Encode(p)
		if err != nil {
			d.logError("encode", "encoding a profile failed", err)
			continue
		}
		outs = append(outs, Output{Type: jp.typ, JobID: jp.jobID, ServiceName: jp.service,
			Labels: jp.labels, Start: start, End: end, Data: data})
		d.m.payloadBytes.Add(float64(len(data)))
	}
	return outs
}

type jobProfile struct {
	typ     profiles.Type
	b       *profiles.Builder
	jobID   string
	service string
	labels  []profiles.Label
	steps   map[string]bool
	// procLabels are each process's sample labels: its step and task.
	procLabels map[procfs.ID][]profiles.Label
}

// profileFor attributes a sample of source s. A sample whose process
// cannot be attributed with certainty (it exited and its pid is gone or
// reused) is counted (count, in the source's Unattributed) and dropped,
// never guessed. builders holds profiles of s only.
func (d *Daemon) profileFor(builders map[string]*jobProfile, s *src, key procfs.ID, count float64) *jobProfile {
	unattr := s.info.Unattributed
	p, ok := d.res.Cached(key)
	if !ok {
		var err error
		p, err = d.res.Resolve(key.PID)
		if err != nil || p.ID != key {
			unattr.WithLabelValues("exited").Add(count)
			return nil
		}
	}
	if p.Foreign {
		unattr.WithLabelValues("other_node").Add(count)
		return nil
	}
	var bk string
	if p.InJob() {
		bk = "job/" + p.Job.Host + "/" + p.Job.ID
	} else if d.cfg.AllProcesses {
		bk = "nojob/" + p.Comm
	} else {
		unattr.WithLabelValues("not_in_job").Add(count)
		return nil
	}
	// Known once profiled, not before: a process in no job yet (before
	// it joins, or is adopted) must still be admitted in full when it is.
	d.knownMu.Lock()
	d.known[key] = true
	d.knownMu.Unlock()
	jp := builders[bk]
	if jp == nil {
		jp = &jobProfile{typ: s.info.Type, b: profiles.NewBuilder(s.info.Type, s.info.Period, s.start),
			steps: map[string]bool{}, procLabels: map[procfs.ID][]profiles.Label{}}
		if p.InJob() {
			jp.jobID = p.Job.ID
		}
		jp.labels = p.Labels()
		for _, l := range jp.labels {
			if l.Name == schema.ServiceName {
				jp.service = l.Value
			}
		}
		builders[bk] = jp
	}
	if _, ok := jp.procLabels[key]; !ok && p.InJob() {
		if p.Step != "" {
			jp.steps[p.Step] = true
		}
		jp.procLabels[key] = d.sampleLabels(p)
	}
	return jp
}

// taskAttrs are the process attributes that label samples with
// Config.RankLabels, in this order after the step.
var taskAttrs = []schema.Attribute{schema.TaskRank, schema.TaskLocalID, schema.NodeIndex}

// sampleLabels are the sample labels of a process in a job: its step and,
// with RankLabels, its task's, each where known. They are never series
// labels of the agent's metrics: a series per rank would multiply the
// series per job.
func (d *Daemon) sampleLabels(p attribution.Process) []profiles.Label {
	var ls []profiles.Label
	if p.Step != "" {
		ls = append(ls, profiles.Label{Name: schema.JobStep.Label, Value: p.Step})
	}
	if !d.cfg.RankLabels {
		return ls
	}
	for _, a := range taskAttrs {
		if v := p.Value(a); v != "" {
			ls = append(ls, profiles.Label{Name: a.Label, Value: v})
		}
	}
	return ls
}
