package daemon

// The interval's log line: one info line per Collect that says what the
// agent profiled and what its sinks delivered, so that an admin sees the
// agent work (or not) without scraping /metrics.

import (
	"context"
	"log/slog"
	"time"

	"github.com/slurmscope/slurmscope/agent/logx"
)

// Delivery is what a Sink has delivered since it started, and what waits
// to be.
type Delivery struct {
	Bytes      uint64 // delivered: pushed, written
	Dropped    uint64 // requests dropped, every reason
	SpoolFiles int    // requests waiting
	SpoolBytes int64
}

// Add is the sum of d and o.
func (d Delivery) Add(o Delivery) Delivery {
	return Delivery{Bytes: d.Bytes + o.Bytes, Dropped: d.Dropped + o.Dropped,
		SpoolFiles: d.SpoolFiles + o.SpoolFiles, SpoolBytes: d.SpoolBytes + o.SpoolBytes}
}

// Reporter is a Sink that says what it delivered, for the interval's line.
type Reporter interface {
	Delivery() Delivery
}

// DeliveryOf is s's Delivery; false when s reports none.
func DeliveryOf(s Sink) (Delivery, bool) {
	if r, ok := s.(Reporter); ok {
		return r.Delivery(), true
	}
	return Delivery{}, false
}

// interval is what one Collect made.
type interval struct {
	samples  []*typeCount // by sample type, in the sources' order
	jobs     map[string]bool
	profiles int
	bytes    int // encoded profiles
}

// typeCount counts samples in a source's first sample type (samples for
// CPU, kernel launches for GPU): put in a profile, or unattributed.
type typeCount struct {
	name             string
	profiled, others int64
}

// newInterval counts the samples of srcs, each listed even when it
// fails to drain.
func newInterval(srcs []*src) *interval {
	iv := &interval{jobs: map[string]bool{}}
	for _, s := range srcs {
		iv.of(s)
	}
	return iv
}

// of is the count of source s's sample type.
func (iv *interval) of(s *src) *typeCount {
	name := "samples"
	if st := s.info.Type.SampleTypes; len(st) > 0 {
		name = st[0].Type
	}
	for _, c := range iv.samples {
		if c.name == name {
			return c
		}
	}
	c := &typeCount{name: name}
	iv.samples = append(iv.samples, c)
	return c
}

func (iv *interval) add(outs []Output) {
	for _, o := range outs {
		iv.profiles++
		iv.bytes += len(o.Data)
		if o.JobID != "" {
			iv.jobs[o.JobID] = true
		}
	}
}

// intervalAttrs are the interval line's fields: jobs profiled, profiles
// and their bytes, samples in profiles and not, then, when the sinks say,
// the bytes they delivered and the requests they dropped since the last
// line (del minus last), and what waits in their spools.
func intervalAttrs(iv *interval, del, last Delivery, reported bool, took time.Duration) []slog.Attr {
	attrs := []slog.Attr{slog.Int("jobs", len(iv.jobs)), slog.Int("profiles", iv.profiles)}
	for _, c := range iv.samples {
		attrs = append(attrs, slog.Int64(c.name, c.profiled), slog.Int64(c.name+"_unattributed", c.others))
	}
	attrs = append(attrs, slog.Int("profile_bytes", iv.bytes))
	if reported {
		attrs = append(attrs,
			slog.Uint64("shipped_bytes", del.Bytes-min(last.Bytes, del.Bytes)),
			slog.Int("spool_files", del.SpoolFiles), slog.Int64("spool_bytes", del.SpoolBytes),
			slog.Uint64("dropped", del.Dropped-min(last.Dropped, del.Dropped)))
	}
	return append(attrs, slog.Duration("took", took.Round(time.Millisecond)))
}

// logInterval logs the interval's line, with the sinks' delivery since the
// last one.
func (d *Daemon) logInterval(iv *interval, took time.Duration) {
	del, reported := DeliveryOf(d.sink)
	last := d.lastDelivery
	d.lastDelivery = del
	if !d.cfg.Log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	d.cfg.Log.LogAttrs(context.Background(), slog.LevelInfo, "interval", intervalAttrs(iv, del, last, reported, took)...)
}

// newLimiter is the daemon's error logger: an error logged when new, then
// now and then with its count. Its clock is the wall's, not Config.Now,
// which stamps the profiles.
func newLimiter(log *slog.Logger) *logx.Limiter { return logx.NewLimiter(log, logx.Options{}) }
