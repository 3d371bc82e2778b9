package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	googlev1 "github.com/grafana/pyroscope/api/gen/proto/go/google/v1"
	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/internal/testenv/pyrostandin"
	"github.com/slurmscope/slurmscope/schema"
)

// offCPUSeries is one pushed off_cpu profile as the agent builds it: per
// stack ("root;...;leaf"), its switches, runnable and blocked time, as
// the schema's sample types say.
func offCPUSeries(at time.Time, stacks map[string][3]int64, labels ...string) *pushv1.RawProfileSeries {
	str := []string{""}
	idx := func(s string) int64 {
		if i := slices.Index(str, s); i >= 0 {
			return int64(i)
		}
		str = append(str, s)
		return int64(len(str) - 1)
	}
	vt := func(v schema.ValueType) *googlev1.ValueType {
		return &googlev1.ValueType{Type: idx(v.Type), Unit: idx(v.Unit)}
	}
	p := &googlev1.Profile{Period: 1, TimeNanos: at.UnixNano(), PeriodType: vt(schema.OffCPU.PeriodType)}
	for _, st := range schema.OffCPU.SampleTypes {
		p.SampleType = append(p.SampleType, vt(st))
	}
	ids := map[string]uint64{}
	for _, stack := range slices.Sorted(maps.Keys(stacks)) {
		frames := strings.Split(stack, ";")
		var locs []uint64
		for i := len(frames) - 1; i >= 0; i-- {
			id, ok := ids[frames[i]]
			if !ok {
				id = uint64(len(ids) + 1)
				ids[frames[i]] = id
				p.Function = append(p.Function, &googlev1.Function{Id: id, Name: idx(frames[i])})
				p.Location = append(p.Location, &googlev1.Location{Id: id, Line: []*googlev1.Line{{FunctionId: id}}})
			}
			locs = append(locs, id)
		}
		v := stacks[stack]
		p.Sample = append(p.Sample, &googlev1.Sample{LocationId: locs, Value: v[:]})
	}
	p.StringTable = str
	raw, err := proto.Marshal(p)
	if err != nil {
		panic(err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(raw)
	zw.Close()
	ls := []*typesv1.LabelPair{{Name: "__name__", Value: schema.OffCPU.Name}}
	for i := 0; i+1 < len(labels); i += 2 {
		ls = append(ls, &typesv1.LabelPair{Name: labels[i], Value: labels[i+1]})
	}
	return &pushv1.RawProfileSeries{Labels: ls, Samples: []*pushv1.RawSample{{RawProfile: b.Bytes()}}}
}

// pyroOffCPU runs a stand-in holding CPU profiles of jobs 4242 and 5151,
// and off-CPU profiles of job 4242 only: its threads blocked 6 s reading
// under load_batch and 2 s on a condition variable, and waited 50 s for
// a CPU in compute (runnable time, which the report must not count).
func pyroOffCPU(t *testing.T, end time.Time) string {
	t.Helper()
	srv := httptest.NewServer(pyrostandin.New(pyrostandin.WithClock(func() time.Time { return end })).Handler())
	t.Cleanup(srv.Close)
	at := end.Add(-30 * time.Minute)
	job := func(id string) []string {
		return []string{schema.ServiceName, "train", schema.JobID.Label, id, schema.HostName.Label, "node-a"}
	}
	req := &pushv1.PushRequest{Series: []*pushv1.RawProfileSeries{
		pyrostandin.CPUSeries(at, map[string]int64{"python;train;matmul": 3e9}, job("4242")...),
		pyrostandin.CPUSeries(at, map[string]int64{"python;train;matmul": 3e9}, job("5151")...),
		offCPUSeries(at, map[string][3]int64{
			"python;train;load_batch;read;entry_SYSCALL_64_after_hwframe;do_syscall_64;ksys_read;vfs_read;pipe_read;schedule":             {40, 0, 6e9},
			"python;worker;pthread_cond_wait;__pthread_cond_wait_common;entry_SYSCALL_64_after_hwframe;do_syscall_64;futex_wait;schedule": {10, 0, 2e9},
			"python;train;compute;asm_sysvec_apic_timer_interrupt;preempt_schedule_irq":                                                   {500, 50e9, 0},
		}, job("4242")...),
	}}
	if _, err := pushv1connect.NewPusherServiceClient(http.DefaultClient, srv.URL).Push(context.Background(), connect.NewRequest(req)); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}

// The report lists where the job's threads blocked after its CPU
// functions, from blocked time alone, in text and in JSON; a job without
// off-CPU profiles gets no such section or key, and no error.
func TestJobListsOffCPUFunctions(t *testing.T) {
	end := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pyro := pyroOffCPU(t, end)
	to := end.Format(time.RFC3339)
	code, stdout, stderr := run("job", "4242", "--pyroscope-url", pyro, "--to", to)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	cpu := strings.Index(stdout, "top CPU functions")
	off := strings.Index(stdout, "top off-CPU functions, blocked (of 8.00s blocked time):")
	if cpu < 0 || off < cpu {
		t.Fatalf("no off-CPU section after the CPU functions:\n%s", stdout)
	}
	for _, row := range []string{`6.00s\s+75%\s+read\s+load_batch`, `2.00s\s+25%\s+pthread_cond_wait\s+worker`} {
		if !regexp.MustCompile(row).MatchString(stdout[off:]) {
			t.Errorf("no row %s:\n%s", row, stdout[off:])
		}
	}
	if strings.Contains(stdout, "compute") || strings.Contains(stdout, "preempt") {
		t.Errorf("runnable time in the report:\n%s", stdout)
	}

	code, stdout, stderr = run("job", "4242", "--pyroscope-url", pyro, "--to", to, "--json")
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	var rep struct {
		Profile string           `json:"off_cpu_profile_type"`
		Blocked int64            `json:"off_cpu_blocked_ns"`
		Top     []map[string]any `json:"top_off_cpu_functions"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	want := []map[string]any{{"function": "read", "caller": "load_batch", "blocked_ns": 6e9}, {"function": "pthread_cond_wait", "caller": "worker", "blocked_ns": 2e9}}
	if rep.Profile != schema.OffCPU.ID() || rep.Blocked != 8e9 || !reflect.DeepEqual(rep.Top, want) {
		t.Errorf("--json off-CPU: %s %d %v", rep.Profile, rep.Blocked, rep.Top)
	}

	for _, args := range [][]string{{"job", "5151"}, {"job", "5151", "--json"}} {
		code, stdout, stderr = run(append(args, "--pyroscope-url", pyro, "--to", to)...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "matmul") || strings.Contains(stdout, "off-CPU") || strings.Contains(stdout, "off_cpu") {
			t.Errorf("%v without off-CPU profiles: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
	}
}

// A wait's names come from a job: they are printed escaped, like every
// other name in the report.
func TestJobPrintsWaitsEscaped(t *testing.T) {
	rep := &query.JobReport{JobID: "42", Findings: []findings.Finding{}, OffCPUProfile: schema.OffCPU.ID(), OffCPUBlocked: 4e9,
		TopOffCPU: []findings.Wait{{Function: "read\x1b[2J", Caller: "", Blocked: 3e9}, {Function: "poll", Caller: "loop\nforged", Blocked: 1e9}}}
	var b strings.Builder
	printJob(&b, rep)
	out := b.String()
	if strings.ContainsAny(out, "\x1b") || strings.Contains(out, "\nforged") {
		t.Fatalf("raw control characters:\n%q", out)
	}
	for _, row := range []string{`3.00s\s+75%\s+read\\x1b\[2J\s+-`, `1.00s\s+25%\s+poll\s+loop\\nforged`} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("no row %s:\n%s", row, out)
		}
	}
}

// Time GPU tracing stood aside is said, and only when there is some.
func TestJobPrintsGPUUntraced(t *testing.T) {
	var b strings.Builder
	printJob(&b, &query.JobReport{JobID: "42", Findings: []findings.Finding{}, GPUUntraced: 3.5e9})
	if !strings.Contains(b.String(), "GPU kernel tracing stood aside for 3.50s") {
		t.Errorf("no untraced line:\n%s", b.String())
	}
	b.Reset()
	printJob(&b, &query.JobReport{JobID: "42", Findings: []findings.Finding{}})
	if strings.Contains(b.String(), "stood aside") {
		t.Errorf("untraced line without untraced time:\n%s", b.String())
	}
}
