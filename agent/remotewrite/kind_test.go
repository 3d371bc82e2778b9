package remotewrite

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/service/servicetest"
	"github.com/slurmscope/slurmscope/agent/ship/shiptest"
	"github.com/slurmscope/slurmscope/schema"
)

func parsedKind(t *testing.T, args ...string) *Kind { return servicetest.Parse(t, &Kind{}, args...) }

// TestKindWritesTheRegistry: with --prometheus-remote-write-url the kind
// remote-writes env's registry through --remote-write-spool-dir, with the
// tenant of its flag and the node's host_name on every series.
func TestKindWritesTheRegistry(t *testing.T) {
	rcv := newReceiver(t)
	dir := tempSpoolDir(t)
	k := parsedKind(t, "--prometheus-remote-write-url="+rcv.url(), "--prometheus-remote-write-tenant=rw-tenant",
		"--prometheus-remote-write-interval=1h", "--remote-write-spool-dir="+dir)
	if k.cfg.Interval != time.Hour {
		t.Errorf("interval %v, want 1h", k.cfg.Interval)
	}
	reg := prometheus.NewPedanticRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_gauge", Help: "a test gauge"})
	g.Set(7)
	reg.MustRegister(g)
	svc, err := k.Open(service.Env{HostName: "node1", Reg: reg, Gatherer: reg, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	shiptest.RequireHeld(t, dir)
	stop := servicetest.Run(t, svc)
	waitFor(t, "a request", func() bool { return len(rcv.accepted()) > 0 })
	stop()
	req := rcv.all()[0]
	if got := req.header.Get(TenantHeader); got != "rw-tenant" {
		t.Errorf("tenant %q, want rw-tenant", got)
	}
	found := map[string]bool{}
	for _, s := range rcv.accepted() {
		ls := map[string]string{}
		for _, l := range s.Labels {
			ls[l.Name] = l.Value
		}
		if ls[schema.HostName.Label] != "node1" {
			t.Errorf("series %v without host_name node1", ls)
		}
		found[ls[MetricNameLabel]] = true
	}
	// The registry's own series, and the writer's counters, registered
	// in it by Open.
	for _, name := range []string{"test_gauge", schema.RemoteWriteSpoolRequests.Name} {
		if !found[name] {
			t.Errorf("no %s written; got %v", name, found)
		}
	}
}

// TestKindOffWithoutURL: without a URL the kind opens nothing, and its
// flags keep their defaults.
func TestKindOffWithoutURL(t *testing.T) {
	k := parsedKind(t)
	if k.cfg.Interval != 15*time.Second || k.cfg.Timeout != 30*time.Second || k.spool.MaxBytes != 64<<20 ||
		k.spool.Dir != "/var/lib/slurmscope/remote-write" {
		t.Errorf("defaults: %+v, spool %+v", k.cfg, k.spool)
	}
	svc, err := k.Open(service.Env{Reg: prometheus.NewRegistry(), Log: quietLog()})
	if svc != nil || err != nil {
		t.Fatalf("Open: %v, %v; want nothing", svc, err)
	}
}
