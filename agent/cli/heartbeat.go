package cli

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// heartbeat serves what every agent exports, whatever it runs, for the
// "agent stopped reporting" alert rule: when it started, and the end of
// the last interval it delivered (schema.AgentLastInterval). Until the
// daemon has delivered one, that is the start, so that an agent stuck
// before its first interval goes stale as one stuck later does; with no
// profile source on (metrics only), it is the time of the gather: the
// agent serves and pushes, which is all it does.
type heartbeat struct {
	start       time.Time
	now         func() time.Time
	last, began *prometheus.Desc

	d           atomic.Pointer[daemon.Daemon]
	metricsOnly atomic.Bool
}

func newHeartbeat(host string, now func() time.Time) *heartbeat {
	return &heartbeat{
		start: now(), now: now,
		last:  promschema.Desc(schema.AgentLastInterval, host, false),
		began: promschema.Desc(schema.AgentStartTime, host, false),
	}
}

// follow makes the heartbeat the daemon's last delivered interval.
func (h *heartbeat) follow(d *daemon.Daemon) { h.d.Store(d) }

// serveOnly makes the heartbeat the time of each gather: the agent runs no
// profile source.
func (h *heartbeat) serveOnly() { h.metricsOnly.Store(true) }

func (h *heartbeat) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.last
	ch <- h.began
}

func (h *heartbeat) Collect(ch chan<- prometheus.Metric) {
	last := h.start
	if d := h.d.Load(); d != nil {
		if t, ok := d.LastInterval(); ok {
			last = t
		}
	} else if h.metricsOnly.Load() {
		last = h.now()
	}
	ch <- prometheus.MustNewConstMetric(h.last, prometheus.GaugeValue, unixSeconds(last))
	ch <- prometheus.MustNewConstMetric(h.began, prometheus.GaugeValue, unixSeconds(h.start))
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
