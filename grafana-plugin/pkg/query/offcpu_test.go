package query

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	querierv1 "github.com/grafana/pyroscope/api/gen/proto/go/querier/v1"
	typesv1 "github.com/grafana/pyroscope/api/gen/proto/go/types/v1"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/schema"
)

// usageProm fakes Prometheus for Usage: each job ran on node n1 for the
// hour of the range, from its start, and used cores[0] of its cores[1].
// A selector on a job or a user sees only that job or the user's (job id
// "1" is user "u1").
type usageProm map[string][2]float64

func (f usageProm) Query(_ context.Context, expr string, _ time.Time) ([]backends.PromSeries, error) {
	windowed := strings.Contains(expr, "_over_time(")
	other := func(label, value string) bool {
		return strings.Contains(expr, label+`="`) && !strings.Contains(expr, label+`="`+value+`"`)
	}
	var out []backends.PromSeries
	for id, c := range f {
		user := "u" + id
		if other(schema.JobID.Label, id) || other(schema.JobUser.Label, user) {
			continue
		}
		var v float64
		switch min := strings.HasPrefix(expr, "min "); {
		case !windowed: // the job seen before the range: it was not
			continue
		case strings.Contains(expr, schema.JobLastSeen.Name) && !min:
			v = 3600
		case strings.Contains(expr, schema.HostCPUUsage.Job.Name) && !min:
			v = c[0] * 3600
		case strings.Contains(expr, schema.HostCPUs.Job.Name):
			v = c[1]
		case strings.Contains(expr, schema.JobLastSeen.Name), strings.Contains(expr, schema.HostCPUUsage.Job.Name):
			v = 0
		default:
			continue
		}
		out = append(out, backends.PromSeries{Labels: map[string]string{schema.JobID.Label: id, schema.JobUser.Label: user,
			schema.HostName.Label: "n1"}, Samples: []backends.Sample{{T: now, V: v}}})
	}
	return out, nil
}

func (usageProm) QueryRange(context.Context, string, time.Time, time.Time, time.Duration) ([]backends.PromSeries, error) {
	return nil, nil
}

func (usageProm) LabelValues(context.Context, string, []string, time.Time, time.Time) ([]string, error) {
	return nil, nil
}

// offCPUPyro fakes Pyroscope: it holds profiles of types, and answers a
// flame graph of the blocked type with the stacks ("root;...;leaf" -> ns)
// of the job its selector names; every other graph is empty. It records
// its calls.
type offCPUPyro struct {
	types  []string
	stacks map[string]map[string]int64
	// untraced is each job's GPU time stood aside, for GPUUntraced.
	untraced map[string]int64
	err      error

	mu    sync.Mutex
	calls []string // "ProfileTypes", or "MergeStacktraces <profile type> <selector>"
}

var jobIDRE = regexp.MustCompile(schema.JobID.Label + `="([^"]*)"`)

func (p *offCPUPyro) record(c string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, c)
	return p.err
}

func (p *offCPUPyro) MergeStacktraces(_ context.Context, pt, sel string, _, _ time.Time, _ int64) (*querierv1.FlameGraph, error) {
	if err := p.record("MergeStacktraces " + pt + " " + sel); err != nil {
		return nil, err
	}
	t := flame.New()
	if m := jobIDRE.FindStringSubmatch(sel); m != nil && pt == schema.OffCPU.ID() {
		for stack, v := range p.stacks[m[1]] {
			t.Add(strings.Split(stack, ";"), v)
		}
	}
	if m := jobIDRE.FindStringSubmatch(sel); m != nil && pt == schema.GPUUntraced.ID() && p.untraced[m[1]] > 0 {
		t.Add([]string{"[gpu tracing stepped aside]"}, p.untraced[m[1]])
	}
	return t.Flamegraph(), nil
}

func (p *offCPUPyro) Diff(context.Context, string, backends.Selection, backends.Selection, int64) (*querierv1.FlameGraphDiff, error) {
	return &querierv1.FlameGraphDiff{}, p.record("Diff")
}

func (p *offCPUPyro) SelectSeries(context.Context, string, string, []string, time.Time, time.Time, time.Duration) ([]*typesv1.Series, error) {
	return nil, p.record("SelectSeries")
}

func (p *offCPUPyro) ProfileTypes(context.Context, time.Time, time.Time) ([]*typesv1.ProfileType, error) {
	out := make([]*typesv1.ProfileType, len(p.types))
	for i, id := range p.types {
		out[i] = &typesv1.ProfileType{ID: id}
	}
	return out, p.record("ProfileTypes")
}

// merges are the flame graph calls p was asked, as "<profile type>
// <selector>", sorted.
func (p *offCPUPyro) merges() []string {
	var out []string
	for _, c := range p.calls {
		if rest, ok := strings.CutPrefix(c, "MergeStacktraces "); ok {
			out = append(out, rest)
		}
	}
	slices.Sort(out)
	return out
}

// Every type Pyroscope splits the agent's off_cpu profile into.
var offCPUHeld = []string{schema.ProcessCPU.ID(), schema.OffCPU.ID(), schema.OffCPURunnable.ID(), "off_cpu:switches:count:off_cpu:nanoseconds"}

// stacksOf is "root;...;leaf" -> ns from root-first frames.
func stacksOf(s ...any) map[string]int64 {
	out := map[string]int64{}
	for i := 0; i+1 < len(s); i += 2 {
		out[strings.Join(s[i].([]string), ";")] = s[i+1].(int64)
	}
	return out
}

// Job 1's threads blocked 100 s: 73 reading a pipe, 20 on a condition
// variable, 7 writing.
var job1Stacks = stacksOf(
	[]string{"main", "load_batch", "read", "entry_SYSCALL_64_after_hwframe", "do_syscall_64", "ksys_read", "vfs_read", "pipe_read", "schedule"}, int64(73e9),
	[]string{"start_thread", "worker", "pthread_cond_wait", "__pthread_cond_wait_common", "entry_SYSCALL_64_after_hwframe", "do_syscall_64",
		"__x64_sys_futex", "futex_wait", "futex_wait_queue", "schedule"}, int64(20e9),
	[]string{"main", "log", "write", "entry_SYSCALL_64_after_hwframe", "do_syscall_64", "schedule"}, int64(7e9),
)

func summaries(fs []findings.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.JobID+" "+string(f.Kind)+": "+f.Summary)
	}
	return out
}

var lastHour = Range{From: now.Add(-time.Hour), To: now, Step: time.Minute}

// A job with idle cores is named its top waits from its blocked off-CPU
// time; one without off-CPU data keeps the finding as it was, and a job
// that used its cores costs no profile call.
func TestFindingsNameTheWaits(t *testing.T) {
	p := &offCPUPyro{types: offCPUHeld, stacks: map[string]map[string]int64{"1": job1Stacks, "3": job1Stacks}}
	e := &Engine{Profiles: p, Metrics: usageProm{"1": {2, 16}, "2": {1, 8}, "3": {15, 16}}}
	fs, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"1 cpuUnderused: used 2 of 16 cores (12%); 73% of its threads' blocked time is in `read` under `load_batch`, 20% in `pthread_cond_wait` under `worker`",
		"2 cpuUnderused: used 1 of 8 cores (12%)",
	}
	if got := summaries(fs); !reflect.DeepEqual(got, want) {
		t.Errorf("findings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Only the blocked type, never the runnable one, and only for the
	// jobs with idle cores.
	wantCalls := []string{schema.OffCPU.ID() + ` {slurm_job_id="1"}`, schema.OffCPU.ID() + ` {slurm_job_id="2"}`}
	if got := p.merges(); !reflect.DeepEqual(got, wantCalls) {
		t.Errorf("flame graph calls %q, want %q", got, wantCalls)
	}
	// Numbers for alert rules, and a kind that names no waits, cost no
	// Pyroscope call; their findings are the same.
	p.calls = nil
	nums, err := e.Findings(context.Background(), Scope{}, lastHour, "")
	if err != nil || len(nums) != 2 || nums[0].Value != fs[0].Value || strings.Contains(nums[0].Summary, "blocked") {
		t.Errorf("findings for numbers: %+v, %v", nums, err)
	}
	if _, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, findings.MemoryNearLimit); err != nil || len(p.calls) != 0 {
		t.Errorf("Pyroscope calls %q, %v", p.calls, err)
	}
}

// Without off-CPU profiles in the range, or without Pyroscope, the
// findings are as they were, at the cost of one ProfileTypes call, and
// one SelectSeries call that finds no job with ranks to judge.
func TestFindingsWithoutOffCPUData(t *testing.T) {
	m := usageProm{"1": {2, 16}}
	want := []string{"1 cpuUnderused: used 2 of 16 cores (12%)"}
	p := &offCPUPyro{types: []string{schema.ProcessCPU.ID()}, stacks: map[string]map[string]int64{"1": job1Stacks}}
	for name, e := range map[string]*Engine{"no off-CPU type": {Profiles: p, Metrics: m}, "no Pyroscope": {Metrics: m}} {
		fs, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, "")
		if got := summaries(fs); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}
	if !reflect.DeepEqual(p.calls, []string{"ProfileTypes", "SelectSeries"}) {
		t.Errorf("calls %q", p.calls)
	}
}

// A cluster's findings look up at most WaitJobs jobs, those that left the
// most core-hours idle, and no more calls than MaxCalls.
func TestWaitLookupsAreBounded(t *testing.T) {
	m := usageProm{}
	for i := range WaitJobs + 5 {
		m[fmt.Sprintf("%02d", i)] = [2]float64{float64(i) / 10, 16} // 00 the idlest
	}
	p := &offCPUPyro{types: offCPUHeld}
	e := &Engine{Profiles: p, Metrics: m}
	if _, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, ""); err != nil {
		t.Fatal(err)
	}
	looked := func() []string {
		var ids []string
		for _, c := range p.merges() {
			ids = append(ids, jobIDRE.FindStringSubmatch(c)[1])
		}
		return ids
	}
	var want []string
	for i := range WaitJobs {
		want = append(want, fmt.Sprintf("%02d", i))
	}
	if got := looked(); !reflect.DeepEqual(got, want) {
		t.Errorf("looked up %v, want %v", got, want)
	}
	// One ProfileTypes call and five jobs' graphs fit six calls.
	p.calls = nil
	e.MaxCalls = 6
	if _, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, ""); err != nil {
		t.Fatal(err)
	}
	if got := looked(); !reflect.DeepEqual(got, want[:5]) {
		t.Errorf("under MaxCalls 6, looked up %v", got)
	}
	// No room beside the ProfileTypes calls: no waits, and no error.
	p.calls = nil
	e.MaxCalls = 1
	fs, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, "")
	if err != nil || len(fs) != WaitJobs+5 || len(p.calls) != 0 {
		t.Errorf("under MaxCalls 1: %d findings, calls %q, %v", len(fs), p.calls, err)
	}
}

// A restricted user's wait look-ups carry their login, as every other
// call does.
func TestWaitLookupsKeepOwnership(t *testing.T) {
	p := &offCPUPyro{types: offCPUHeld, stacks: map[string]map[string]int64{"1": job1Stacks}}
	e := &Engine{Profiles: p, Metrics: usageProm{"1": {2, 16}, "2": {1, 8}}}
	fs, err := e.FindingsWithWaits(context.Background(), Scope{Restricted: true, Owner: "u1"}, lastHour, "")
	if err != nil || len(fs) != 1 || !strings.Contains(fs[0].Summary, "`read` under `load_batch`") {
		t.Fatalf("u1's findings: %q, %v", summaries(fs), err)
	}
	merges := p.merges()
	for _, c := range merges {
		if !strings.Contains(c, schema.JobUser.Label+`="u1"`) || !strings.Contains(c, schema.JobID.Label+`="1"`) {
			t.Errorf("look-up %s escapes u1's job", c)
		}
	}
	if len(merges) != 1 {
		t.Errorf("look-ups %q", merges)
	}
}

// A Pyroscope that fails fails the query, saying so, as every other
// query that asks it.
func TestWaitLookupFailureFailsTheQuery(t *testing.T) {
	p := &offCPUPyro{types: offCPUHeld, err: &backends.Error{Backend: "pyroscope", Status: 503, Msg: "HTTP 503 Service Unavailable"}}
	e := &Engine{Profiles: p, Metrics: usageProm{"1": {2, 16}}}
	_, err := e.FindingsWithWaits(context.Background(), Scope{}, lastHour, "")
	var be *backends.Error
	if !errors.As(err, &be) || be.Backend != "pyroscope" {
		t.Errorf("error %v", err)
	}
}

// Waits are summed by function and caller over every stack; what
// Pyroscope folded into "other" is no one place, yet counts in the total.
func TestTopWaits(t *testing.T) {
	tr := flame.New()
	tr.Add([]string{"main", "load_batch", "read", "entry_SYSCALL_64", "pipe_read", "schedule"}, 5)
	tr.Add([]string{"main", "load_batch", "read", "entry_SYSCALL_64", "sock_read_iter", "schedule"}, 4)
	tr.Add([]string{"main", "save", "write"}, 3)
	tr.Add([]string{"main", flame.OtherName}, 20)
	got := topWaits(tr, 0)
	want := []findings.Wait{{Function: "read", Caller: "load_batch", Blocked: 9}, {Function: "write", Caller: "save", Blocked: 3}}
	if !reflect.DeepEqual(got, want) || tr.Total() != 32 {
		t.Errorf("waits %+v of %d, want %+v", got, tr.Total(), want)
	}
	if got := topWaits(tr, 1); len(got) != 1 || got[0].Function != "read" {
		t.Errorf("top 1: %+v", got)
	}
}

// The job report lists where the job's threads blocked and its findings
// name the same waits; a job without off-CPU profiles has neither, though
// other jobs have them.
func TestJobReportsWaits(t *testing.T) {
	p := &offCPUPyro{types: offCPUHeld, stacks: map[string]map[string]int64{"1": job1Stacks}}
	e := &Engine{Profiles: p, Metrics: usageProm{"1": {2, 16}, "2": {1, 8}}}
	rep, err := e.Job(context.Background(), "1", lastHour)
	if err != nil {
		t.Fatal(err)
	}
	want := []findings.Wait{{Function: "read", Caller: "load_batch", Blocked: 73e9},
		{Function: "pthread_cond_wait", Caller: "worker", Blocked: 20e9}, {Function: "write", Caller: "log", Blocked: 7e9}}
	if rep.OffCPUProfile != schema.OffCPU.ID() || rep.OffCPUBlocked != 100e9 || !reflect.DeepEqual(rep.TopOffCPU, want) {
		t.Errorf("off-CPU: %s %d %+v", rep.OffCPUProfile, rep.OffCPUBlocked, rep.TopOffCPU)
	}
	if len(rep.Findings) != 1 || !strings.HasSuffix(rep.Findings[0].Summary, "; 73% of its threads' blocked time is in `read` under `load_batch`, 20% in `pthread_cond_wait` under `worker`") {
		t.Errorf("findings %q", summaries(rep.Findings))
	}
	for _, c := range p.merges() {
		if strings.HasPrefix(c, schema.OffCPURunnable.ID()) {
			t.Errorf("the report asked for runnable time: %s", c)
		}
	}
	rep, err = e.Job(context.Background(), "2", lastHour)
	if err != nil || rep.OffCPUProfile != "" || rep.OffCPUBlocked != 0 || rep.TopOffCPU != nil ||
		len(rep.Findings) != 1 || rep.Findings[0].Summary != "used 1 of 8 cores (12%)" {
		t.Errorf("job 2: %+v, %v", rep, err)
	}
}

// The report says how long GPU tracing stood aside for the job's own
// profiler, only where Pyroscope holds that type and the job has some.
func TestJobReportsGPUUntraced(t *testing.T) {
	p := &offCPUPyro{types: append(slices.Clone(offCPUHeld), schema.GPUUntraced.ID()), untraced: map[string]int64{"1": 42e9}}
	e := &Engine{Profiles: p, Metrics: usageProm{"1": {2, 16}, "2": {1, 8}}}
	for job, want := range map[string]int64{"1": 42e9, "2": 0} {
		rep, err := e.Job(context.Background(), job, lastHour)
		if err != nil || rep.GPUUntraced != want {
			t.Errorf("job %s: untraced %d, %v; want %d", job, rep.GPUUntraced, err, want)
		}
	}
	p = &offCPUPyro{types: offCPUHeld, untraced: map[string]int64{"1": 42e9}}
	e = &Engine{Profiles: p, Metrics: usageProm{"1": {2, 16}}}
	if rep, err := e.Job(context.Background(), "1", lastHour); err != nil || rep.GPUUntraced != 0 {
		t.Errorf("no such type held: %d, %v", rep.GPUUntraced, err)
	}
	for _, c := range p.merges() {
		if strings.HasPrefix(c, schema.GPUUntraced.ID()) {
			t.Errorf("asked for a type Pyroscope does not hold: %s", c)
		}
	}
}
