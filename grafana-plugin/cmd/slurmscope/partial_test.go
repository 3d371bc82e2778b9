package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
)

// downURL is a server that was there and is gone: connection refused.
func downURL(t *testing.T) string {
	srv := httptest.NewServer(nil)
	srv.Close()
	return srv.URL
}

// When one backend fails, the report holds what the other gave, with a
// note that says which failed and why; the exit status, 4, says the report
// is partial. When both fail, or the one left holds nothing of the job,
// there is no report: exit 1.
func TestJobPartial(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pyro := pyroWith(t, end, map[string][]time.Time{"4242": {end.Add(-30 * time.Minute)}})
	prom := fakeProm(t, map[string][]string{"4242": {"node-a"}})
	down := downURL(t)
	to := []string{"--to", end.Format(time.RFC3339)}
	for _, tc := range []struct {
		name        string
		args        []string
		code        int
		stdout      []string // substrings
		stderr      []string
		missingNote string // the engine's, which would mislead
	}{
		{"Prometheus down", []string{"4242", "--pyroscope-url", pyro, "--prometheus-url", down}, exitPartial,
			[]string{"note: prometheus failed, so this report has only Pyroscope's part (no findings, host or GPU use): prometheus: cannot connect", "nodes (1): node-a", "train"},
			[]string{"slurmscope job: partial report (exit status 4): prometheus failed"}, "no Prometheus URL"},
		{"Pyroscope down", []string{"4242", "--pyroscope-url", down, "--prometheus-url", prom}, exitPartial,
			[]string{"note: pyroscope failed, so this report has only Prometheus' part (no CPU functions, off-CPU waits or GPU kernels): pyroscope: cannot connect", "findings: none", "nodes (1): node-a"},
			[]string{"slurmscope job: partial report (exit status 4): pyroscope failed"}, "no Pyroscope URL"},
		{"both down", []string{"4242", "--pyroscope-url", down, "--prometheus-url", down}, exitFail,
			nil, []string{"slurmscope job: pyroscope: cannot connect", "slurmscope job: prometheus: cannot connect"}, ""},
		{"Prometheus down, no profiles of the job", []string{"999", "--pyroscope-url", pyro, "--prometheus-url", down}, exitFail,
			nil, []string{"slurmscope job: prometheus: cannot connect"}, ""},
		{"the only backend down", []string{"4242", "--prometheus-url", down}, exitFail,
			nil, []string{"slurmscope job: prometheus: cannot connect"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(append(append([]string{"job"}, tc.args...), to...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if tc.code != exitPartial {
				if stdout != "" || strings.Contains(stderr, "no data") {
					t.Errorf("a report, or a no-data note, without a backend to trust:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
				return
			}
			if strings.Contains(stdout, tc.missingNote) {
				t.Errorf("the report says %q of a backend that failed:\n%s", tc.missingNote, stdout)
			}
			code, stdout, _ = run(append(append([]string{"job", "--json"}, tc.args...), to...)...)
			var got struct {
				Warnings []string `json:"warnings"`
				Nodes    []string `json:"nodes"`
			}
			if err := json.Unmarshal([]byte(stdout), &got); code != exitPartial || err != nil || strings.Contains(stdout, "null") ||
				len(got.Warnings) == 0 || !strings.Contains(got.Warnings[0], " failed, so this report has only ") || len(got.Nodes) != 1 {
				t.Errorf("--json: exit %d, %v\n%s", code, err, stdout)
			}
		})
	}
}

// Only failures that all came from one backend make a partial report: a
// call budget exceeded is the user's to fix, not to hide.
func TestFailedBackend(t *testing.T) {
	pyro := &backends.Error{Backend: "pyroscope", Msg: "HTTP 503"}
	prom := &backends.Error{Backend: "prometheus", Msg: "cannot connect"}
	budget := fmt.Errorf("%w: over the limit", query.ErrTooManyCalls)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{pyro, "pyroscope"},
		{errors.Join(prom, fmt.Errorf("chunk 2: %w", prom)), "prometheus"},
		{errors.Join(pyro, prom), ""},
		{errors.Join(prom, budget), ""},
		{budget, ""},
	} {
		if got := failedBackend(tc.err); got != tc.want {
			t.Errorf("failedBackend(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
