package pyroscope_test

import (
	"context"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/profiles"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/agent/service/servicetest"
	"github.com/slurmscope/slurmscope/agent/ship/shiptest"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

func kind(t *testing.T, args ...string) *pyroscope.Kind {
	return servicetest.Parse(t, &pyroscope.Kind{}, args...)
}

// TestKindPushesProfiles: with --pyroscope-url, the kind opens a sink that
// spools in --spool-dir what the daemon writes and pushes it, with the
// tenant of --pyroscope-tenant, one request per profile labelled as the
// daemon labelled it.
func TestKindPushesProfiles(t *testing.T) {
	srv := startStandin(t, pyrostandin.WithTenant("p-tenant"))
	dir := filepath.Join(t.TempDir(), "spool")
	k := kind(t, "--pyroscope-url="+srv.URL(), "--pyroscope-tenant=p-tenant", "--spool-dir="+dir)
	if err := k.Check(); err != nil {
		t.Fatal(err)
	}
	svc, err := k.Open(service.Env{Reg: prometheus.NewPedanticRegistry(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	shiptest.RequireHeld(t, dir)
	outs := []daemon.Output{
		{Type: profiles.CPU, JobID: "4242", ServiceName: "train-llama", Start: t0, End: t0.Add(time.Second),
			Labels: []profiles.Label{{Name: schema.ServiceName, Value: "train-llama"}, {Name: schema.JobID.Label, Value: "4242"}},
			Data:   pprofGz(t, t0, map[string]int64{"main;work": 1e7})},
		{Type: profiles.CPU, ServiceName: "sshd", Start: t0, End: t0.Add(time.Second),
			Labels: []profiles.Label{{Name: schema.ServiceName, Value: "sshd"}},
			Data:   pprofGz(t, t0, map[string]int64{"main;accept": 1e7})},
	}
	if err := svc.(daemon.Sink).Write(context.Background(), outs); err != nil {
		t.Fatal(err)
	}
	stop := servicetest.Run(t, svc)
	waitFor(t, "two pushes", func() bool { return srv.AcceptedPushes() == 2 })
	stop()
	var got []map[string]string
	for _, r := range srv.Accepted() {
		for _, s := range r.Series {
			ls := map[string]string{}
			for _, l := range s.Labels {
				ls[l.Name] = l.Value
			}
			got = append(got, ls)
		}
	}
	want := []map[string]string{
		{pyroscope.MetricNameLabel: "process_cpu", schema.ServiceName: "train-llama", schema.JobID.Label: "4242"},
		{pyroscope.MetricNameLabel: "process_cpu", schema.ServiceName: "sshd"},
	}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Errorf("series %d: %v, want %v", i, got[i], want[i])
		}
		for n, v := range want[i] {
			if got[i][n] != v {
				t.Errorf("series %d: %s=%q, want %q", i, n, got[i][n], v)
			}
		}
	}
}

// TestKindOffWithoutURL: without --pyroscope-url the kind opens nothing,
// and makes no spool.
func TestKindOffWithoutURL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	svc, err := kind(t, "--spool-dir="+dir).Open(service.Env{Reg: prometheus.NewRegistry(), Log: quiet})
	if svc != nil || err != nil {
		t.Fatalf("Open: %v, %v; want nothing", svc, err)
	}
	if sp, err := spool.Open(dir, 1<<20); err != nil {
		t.Errorf("--spool-dir is held: %v", err)
	} else {
		sp.Close()
	}
}

// TestKindIngestionWindow: the window defaults to Pyroscope's, and a
// negative bound is refused by Check.
func TestKindIngestionWindow(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	(&pyroscope.Kind{}).Flags(fs)
	if d := fs.Lookup("pyroscope-reject-older-than").DefValue; d != pyroscope.DefaultWindow.OlderThan.String() || d != "1h0m0s" {
		t.Errorf("--pyroscope-reject-older-than defaults to %s, want Pyroscope's 1h", d)
	}
	if d := fs.Lookup("pyroscope-reject-newer-than").DefValue; d != "10m0s" {
		t.Errorf("--pyroscope-reject-newer-than defaults to %s, want Pyroscope's 10m", d)
	}
	for _, args := range [][]string{{"--pyroscope-reject-older-than=-1h"}, {"--pyroscope-reject-newer-than=-1s"}} {
		if err := kind(t, args...).Check(); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if err := kind(t, "--pyroscope-reject-older-than=72h", "--pyroscope-reject-newer-than=0").Check(); err != nil {
		t.Errorf("72h and 0: %v", err)
	}
}
