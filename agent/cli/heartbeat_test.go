package cli

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/schema"
)

// beats gathers the heartbeat: its last interval and start time, and the
// host_name both carry.
func beats(t *testing.T, h *heartbeat) (last, start float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		m := f.GetMetric()[0]
		if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != schema.HostName.Label || l[0].GetValue() != "node1" {
			t.Errorf("%s: labels %v, want host_name=node1", f.GetName(), l)
		}
		switch f.GetName() {
		case schema.AgentLastInterval.Name:
			last = m.GetGauge().GetValue()
		case schema.AgentStartTime.Name:
			start = m.GetGauge().GetValue()
		}
	}
	return last, start
}

type okSink struct{}

func (okSink) Write(context.Context, []daemon.Output) error { return nil }

// TestHeartbeat: the start time until the daemon delivers an interval,
// then the end of the last one it delivered; with no profile source, the
// time of each gather.
func TestHeartbeat(t *testing.T) {
	now := time.Unix(1000, 500e6)
	clock := func() time.Time { return now }
	h := newHeartbeat("node1", clock)
	if last, start := beats(t, h); last != 1000.5 || start != 1000.5 {
		t.Fatalf("before the daemon: last %v, start %v; want the start, 1000.5", last, start)
	}
	d := daemon.New(daemon.Config{Now: clock}, nil, nil, nil, okSink{})
	h.follow(d)
	now = now.Add(time.Minute)
	if last, _ := beats(t, h); last != 1000.5 {
		t.Fatalf("before the first interval: last %v, want the start", last)
	}
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute) // the gather's time does not count
	if last, start := beats(t, h); last != 1060.5 || start != 1000.5 {
		t.Fatalf("after an interval: last %v, start %v; want 1060.5, 1000.5", last, start)
	}

	idle := newHeartbeat("node1", clock)
	idle.serveOnly()
	now = now.Add(time.Minute)
	if last, start := beats(t, idle); last != 1180.5 || start != 1120.5 {
		t.Fatalf("metrics only: last %v, start %v; want the gather's time 1180.5, 1120.5", last, start)
	}
}
