package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/internal/version"
	"github.com/slurmscope/slurmscope/schema"
)

// fakeProm answers the Prometheus API with no series, except that the
// node label of jobs in nodes has those values.
func fakeProm(t *testing.T, nodes map[string][]string) string {
	t.Helper()
	srv := httptest.NewServer(promHandler(nodes))
	t.Cleanup(srv.Close)
	return srv.URL
}

// promHandler is fakeProm's handler.
func promHandler(nodes map[string][]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/query":
			w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
		case r.URL.Path == "/api/v1/query_range":
			w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
		case r.URL.Path == "/api/v1/label/"+schema.HostName.Label+"/values":
			vals := []string{}
			for job, ns := range nodes {
				for _, m := range r.Form["match[]"] {
					if strings.Contains(m, `"`+job+`"`) {
						vals = append(vals, ns...)
					}
				}
			}
			json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": vals})
		default:
			http.NotFound(w, r)
		}
	})
}

// pyroWith runs a Pyroscope stand-in holding CPU profiles of each job
// on node-a, taken at each of its times.
func pyroWith(t *testing.T, now time.Time, jobs map[string][]time.Time) string {
	t.Helper()
	srv := httptest.NewServer(pyrostandin.New(pyrostandin.WithClock(func() time.Time { return now }),
		pyrostandin.WithIngestionWindow(4*24*time.Hour, 0)).Handler())
	t.Cleanup(srv.Close)
	req := &pushv1.PushRequest{}
	for job, at := range jobs {
		for _, ts := range at {
			req.Series = append(req.Series, pyrostandin.CPUSeries(ts, map[string]int64{"python;train": 1e9},
				schema.ServiceName, "train", schema.JobID.Label, job, schema.HostName.Label, "node-a"))
		}
	}
	if _, err := pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}

// A job the backends know nothing of in the range (a typo, a range that
// misses it) is not reported as a clean job: exit 3, with a note that
// says so and what to check, in text and in JSON.
func TestJobNoData(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pyro := pyroWith(t, end, map[string][]time.Time{"4242": {end.Add(-30 * time.Minute)}, "7777": {end.Add(-3 * 24 * time.Hour)}})
	prom := fakeProm(t, map[string][]string{"4242": {"node-a"}, "5151": {"node-b"}})
	to := end.Format(time.RFC3339)
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"unknown job, both backends", []string{"999999", "--pyroscope-url", pyro, "--prometheus-url", prom}, 3},
		{"unknown job, Pyroscope only", []string{"999999", "--pyroscope-url", pyro}, 3},
		{"unknown job, Prometheus only", []string{"999999", "--prometheus-url", prom}, 3},
		{"job older than --since", []string{"7777", "--pyroscope-url", pyro, "--prometheus-url", prom, "--since", "48h"}, 3},
		{"known job", []string{"4242", "--pyroscope-url", pyro, "--prometheus-url", prom}, 0},
		{"job older than --since, in a longer one", []string{"7777", "--pyroscope-url", pyro, "--since", "96h"}, 0},
		// Prometheus alone seeing the job is data too, findings or not.
		{"job only Prometheus saw", []string{"5151", "--pyroscope-url", pyro, "--prometheus-url", prom}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			since := "24h0m0s"
			for i, a := range tc.args {
				if a == "--since" {
					d, _ := time.ParseDuration(tc.args[i+1])
					since = d.String()
				}
			}
			args := append([]string{"job"}, append(tc.args, "--to", to)...)
			code, stdout, stderr := run(args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			if tc.code == 0 {
				if strings.Contains(stderr, "no data") {
					t.Errorf("a job with data reads as none:\n%s", stderr)
				}
				return
			}
			job := tc.args[0]
			if stdout != "" || strings.Contains(stderr, "findings") {
				t.Errorf("a job without data printed a report:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			for _, want := range []string{"no data for job " + job + " from ", " to 2026-11-30T12:00:00Z", "--since " + since,
				"sacct -j " + job, "agent must have run on the job's nodes", "array job"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}

			code, stdout, stderr = run(append(args, "--json")...)
			if code != tc.code {
				t.Fatalf("--json: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("--json: %v\n%s", err, stdout)
			}
			if got["no_data"] != true || !strings.HasPrefix(got["error"].(string), "no data for job "+job) ||
				got["job_id"] != job || got["since"] != since || got["to"] != "2026-11-30T12:00:00Z" {
				t.Errorf("--json:\n%s", stdout)
			}
			if hints, _ := got["hints"].([]any); len(hints) == 0 {
				t.Errorf("--json has no hints:\n%s", stdout)
			}
			if _, ok := got["warnings"].([]any); !ok || strings.Contains(stdout, "null") {
				t.Errorf("--json has a null list:\n%s", stdout)
			}
		})
	}
}

// An array task's id, as SLURM prints it, is not a job id the data is
// under: the usage error says what to give instead.
func TestJobArrayTaskID(t *testing.T) {
	for _, id := range []string{"1234_5", "1234_[1-3]"} {
		code, stdout, stderr := run("job", id, "--pyroscope-url", "http://127.0.0.1:1")
		if code != 2 || stdout != "" || !strings.Contains(stderr, id+" is an array job's task") ||
			!strings.Contains(stderr, "sacct -j "+id+" -o JobID,JobIDRaw") {
			t.Errorf("job %s: exit %d\nstdout:\n%s\nstderr:\n%s", id, code, stdout, stderr)
		}
	}
}

// Every list of the JSON report is [] when empty, never null: a job
// seen only by Pyroscope has no hosts, GPUs or findings.
func TestJobJSONListsAreNeverNull(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pyro := pyroWith(t, end, map[string][]time.Time{"4242": {end.Add(-30 * time.Minute)}})
	code, stdout, stderr := run("job", "4242", "--pyroscope-url", pyro, "--to", end.Format(time.RFC3339), "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stdout, "null") {
		t.Errorf("null in the report:\n%s", stdout)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	for _, k := range []string{"findings", "nodes", "host", "gpus", "idle_allocated_gpus", "top_cpu_functions"} {
		if _, ok := got[k].([]any); !ok {
			t.Errorf("%s is %v, want a list:\n%s", k, got[k], stdout)
		}
	}

	// Every list the report has, now and when one is added: a list
	// without omitempty must be [] in an empty report.
	js, err := json.Marshal(jsonReport(&query.JobReport{}))
	if err != nil {
		t.Fatal(err)
	}
	var empty map[string]json.RawMessage
	if err := json.Unmarshal(js, &empty); err != nil {
		t.Fatal(err)
	}
	rt := reflect.TypeOf(query.JobReport{})
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.Slice || strings.Contains(opts, "omitempty") {
			continue
		}
		if string(empty[name]) != "[]" {
			t.Errorf("%s (%s) in an empty report is %s, want []", f.Name, name, empty[name])
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	for _, arg := range []string{"--version", "-version"} {
		code, stdout, stderr := run(arg)
		if want := version.Get().String("slurmscope") + "\n"; code != 0 || stdout != want || stderr != "" {
			t.Errorf("slurmscope %s = %d, %q, %q; want 0, %q", arg, code, stdout, stderr, want)
		}
		if !strings.HasPrefix(stdout, "slurmscope version ") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("slurmscope %s: %q", arg, stdout)
		}
	}
	for _, arg := range []string{"-h", "--help"} {
		code, stdout, _ := run(arg)
		if code != 0 || !strings.Contains(stdout, "--version") || !strings.Contains(stdout, "3 no data") {
			t.Errorf("slurmscope %s = %d\n%s", arg, code, stdout)
		}
	}
	if code, _, help := run("job", "--help"); code != 0 || !strings.Contains(help, "3 no data") {
		t.Errorf("slurmscope job --help = %d, does not give the exit statuses:\n%s", code, help)
	}
}
