package schema

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestTableIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range All {
		if a.Label != LabelFor(a.Name) {
			t.Errorf("%s: wire label %q, want %q", a.Name, a.Label, LabelFor(a.Name))
		}
		if !regexp.MustCompile(`^[a-z_][a-z0-9_]*$`).MatchString(a.Label) {
			t.Errorf("%s: wire label %q is not a plain Prometheus label name", a.Name, a.Label)
		}
		if seen[a.Name] || seen[a.Label] {
			t.Errorf("%s listed twice", a.Name)
		}
		seen[a.Name], seen[a.Label] = true, true
		if a.Description == "" || a.Source == "" {
			t.Errorf("%s: missing description or source", a.Name)
		}
		if a.Scope.String() == "unknown" {
			t.Errorf("%s: scope %d", a.Name, a.Scope)
		}
		if got, ok := ByName(a.Name); !ok || got != a {
			t.Errorf("ByName(%q) = %v, %v", a.Name, got, ok)
		}
		if got, ok := ByLabel(a.Label); !ok || got != a {
			t.Errorf("ByLabel(%q) = %v, %v", a.Label, got, ok)
		}
	}
	if _, ok := ByName("slurm.job.uid"); ok {
		t.Error("ByName accepted an attribute that is not in the table")
	}
}

// The sources table keeps DESIGN.md's identity rules: the owner never
// comes from the environment (and has no variable to read), the job id
// never from SLURM_JOB_ID (read only to check an environment), the step
// only from the path; every job attribute says what decides it, and every
// metadata attribute can be read from each origin that may decide it.
func TestSourcesKeepIdentityRules(t *testing.T) {
	if JobUser.From.Decide&FromEnv != 0 || JobUser.From.Env != "" || JobUser.IsMetadata() {
		t.Errorf("%s may come from the environment: %+v", JobUser.Name, JobUser.From)
	}
	if JobID.From.Decide&(FromEnv|FromSlurmctld) != 0 || JobID.From.Env == "" || JobID.IsMetadata() {
		t.Errorf("%s: %+v; want decided by the path or slurmstepd, its variable read only as a check", JobID.Name, JobID.From)
	}
	if JobStep.From != (Sources{Decide: FromCgroup}) || JobStep.IsMetadata() {
		t.Errorf("%s: %+v", JobStep.Name, JobStep.From)
	}
	envs := map[string]string{}
	for _, a := range All {
		f := a.From
		switch {
		case a.Scope == ScopeJob && f.Decide == 0:
			t.Errorf("%s: nothing decides it", a.Name)
		case a.Scope != ScopeJob && a != JobStep && f != (Sources{}):
			t.Errorf("%s is not a job attribute but has sources %+v", a.Name, f)
		}
		if f.Env != "" {
			if other, ok := envs[f.Env]; ok || !strings.HasPrefix(f.Env, "SLURM_JOB_") {
				t.Errorf("%s: variable %s (also %s's): want one SLURM_JOB_ variable per attribute", a.Name, f.Env, other)
			}
			envs[f.Env] = a.Name
		}
		if !a.IsMetadata() {
			continue
		}
		if f.Decide&FromEnv != 0 && f.Env == "" || f.Decide&FromSlurmctld != 0 && (f.Squeue == "" || f.Scontrol == "") {
			t.Errorf("%s: decided by %b but not read from each: %+v", a.Name, f.Decide, f)
		}
		if !slices.Contains(Metadata(), a) {
			t.Errorf("%s is metadata but not in Metadata()", a.Name)
		}
	}
	if !slices.Contains(Metadata(), JobName) {
		t.Errorf("%s is not metadata", JobName.Name)
	}
}

// baseUnits are Prometheus' base units a metric name may end in.
var baseUnits = []string{"ratio", "bytes", "seconds", "watts", "celsius", "hertz", "joules", "volts", "amperes", "meters"}

// misnamed are names that break Prometheus naming but are on the wire;
// renaming one breaks whoever queries it, so it is the maintainers' call.
// None is left.
var misnamed = map[string]string{}

func TestMetricsFollowPrometheusNaming(t *testing.T) {
	name := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	label := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	notBase := regexp.MustCompile(`_(nanoseconds|microseconds|milliseconds|minutes|hours|days|kilobytes|megabytes|gigabytes|kib|mib|gib|percent|milliwatts|mhz|kelvin)(_|$)`)
	seen := map[string]bool{}
	for _, m := range Metrics {
		if seen[m.Name] {
			t.Errorf("%s listed twice", m.Name)
		}
		seen[m.Name] = true
		if got, ok := MetricByName(m.Name); !ok || got.Name != m.Name || got.Help != m.Help {
			t.Errorf("MetricByName(%q) = %v, %v", m.Name, got.Name, ok)
		}
		if !strings.HasPrefix(m.Name, MetricPrefix) || !name.MatchString(m.Name) {
			t.Errorf("%s: want a plain name starting with %s", m.Name, MetricPrefix)
		}
		if m.Help == "" {
			t.Errorf("%s: no help", m.Name)
		}
		base := strings.TrimSuffix(m.Name, "_total")
		if (m.Type == Counter) != (base != m.Name) {
			t.Errorf("%s: a %s; counters, and only counters, end in _total", m.Name, m.Type)
		}
		if m.Unit != "" && (!slices.Contains(baseUnits, m.Unit) || !strings.HasSuffix(base, "_"+m.Unit)) {
			t.Errorf("%s: unit %q: want a base unit the name ends in", m.Name, m.Unit)
		}
		for _, u := range baseUnits {
			if strings.HasSuffix(base, "_"+u) && m.Unit != u {
				t.Errorf("%s: name ends in %s but the unit is %q", m.Name, u, m.Unit)
			}
		}
		if why, ok := misnamed[m.Name]; ok {
			if !notBase.MatchString(m.Name) {
				t.Errorf("%s is listed as misnamed (%s) but is not", m.Name, why)
			}
		} else if notBase.MatchString(m.Name) {
			t.Errorf("%s: not a base unit", m.Name)
		}
		labels := map[string]bool{}
		for _, l := range m.LabelNames(true) {
			if !label.MatchString(l) || l == "le" || l == "quantile" || labels[l] {
				t.Errorf("%s: label %q is reserved, repeated or not a plain label name", m.Name, l)
			}
			labels[l] = true
		}
		for _, a := range m.Attributes {
			if got, ok := ByName(a.Name); !ok || got != a {
				t.Errorf("%s: attribute %q is not the schema's", m.Name, a.Name)
			}
		}
		if m.MIG && !slices.Contains(m.Scopes(), ScopeGPU) {
			t.Errorf("%s: MIG series without GPU attributes", m.Name)
		}
		increasing := true
		for i := 1; i < len(m.Buckets); i++ {
			increasing = increasing && m.Buckets[i] > m.Buckets[i-1]
		}
		if (m.Type == Histogram) != (len(m.Buckets) > 0) || !increasing {
			t.Errorf("%s: a %s with buckets %v; histograms, and only histograms, have increasing buckets", m.Name, m.Type, m.Buckets)
		}
		if !slices.Contains([]string{"", "avg", "sum", "max", "min"}, m.Merge) {
			t.Errorf("%s: merge %q: want avg, sum, max or min", m.Name, m.Merge)
		}
	}
	// Series per job carry the job's key; the job's other attributes are
	// on slurmscope_job_info, which carries them all.
	for _, a := range Scoped(ScopeJob) {
		if !JobInfo.Carries(a) {
			t.Errorf("%s does not carry %s", JobInfo.Name, a.Name)
		}
	}
	for _, a := range JobKey {
		if !JobGPUAllocated.Carries(a) || !JobGPUUtilization.Carries(a) {
			t.Errorf("per-job GPU series lack %s", a.Name)
		}
	}
	if _, ok := MetricByName("slurmscope_gpu_utilisation_ratio"); ok {
		t.Error("MetricByName accepted a metric that is not in the list")
	}
}

// Host metrics come in pairs: the job's cgroup, and each step's with the
// step as its one more label, both listed and both per job.
func TestHostMetricPairs(t *testing.T) {
	if len(HostMetrics) == 0 {
		t.Fatal("no host metrics")
	}
	for _, h := range HostMetrics {
		for _, m := range []Metric{h.Job, h.Step} {
			if got, ok := MetricByName(m.Name); !ok || got.Help != m.Help {
				t.Errorf("%s is not in Metrics", m.Name)
			}
			for _, a := range append([]Attribute{HostName}, JobKey...) {
				if !m.Carries(a) {
					t.Errorf("%s does not carry %s", m.Name, a.Name)
				}
			}
		}
		if h.Job.Carries(JobStep) || !h.Step.Carries(JobStep) {
			t.Errorf("%s / %s: only the step's series carry %s", h.Job.Name, h.Step.Name, JobStep.Name)
		}
		if !slices.Equal(append(slices.Clone(h.Job.LabelNames(false)), JobStep.Label), h.Step.LabelNames(false)) {
			t.Errorf("%s: labels %v, want %v and the step", h.Step.Name, h.Step.LabelNames(false), h.Job.LabelNames(false))
		}
		if h.Job.Type != h.Step.Type || h.Job.Unit != h.Step.Unit || h.Job.Merge == "" || h.Job.Merge != h.Step.Merge {
			t.Errorf("%s and %s differ in type, unit or merge, or are not offered", h.Job.Name, h.Step.Name)
		}
	}
	if !slices.Equal(JobCgroupUnsupported.LabelNames(false), append(JobLastSeen.LabelNames(false), "metric")) {
		t.Errorf("%s: labels %v", JobCgroupUnsupported.Name, JobCgroupUnsupported.LabelNames(false))
	}
}

func TestProfileTypes(t *testing.T) {
	want := map[string]string{
		ProcessCPU.ID():     "process_cpu:cpu:nanoseconds:cpu:nanoseconds",
		GPUTime.ID():        "gpu:gpu_time:nanoseconds:gpu_time:nanoseconds",
		OffCPU.ID():         "off_cpu:blocked:nanoseconds:off_cpu:nanoseconds",
		OffCPURunnable.ID(): "off_cpu:runnable:nanoseconds:off_cpu:nanoseconds",
	}
	for got, w := range want {
		if got != w {
			t.Errorf("id %s, want %s", got, w)
		}
	}
	ids := map[string]bool{}
	for _, p := range ProfileTypes {
		if ids[p.ID()] || p.Title == "" || p.Description == "" || len(p.SampleTypes) == 0 {
			t.Errorf("%s: repeated, or lacks a title, description or sample type", p.ID())
		}
		ids[p.ID()] = true
		if got, ok := ProfileTypeOf(p.ID()); !ok || got.ID() != p.ID() {
			t.Errorf("ProfileTypeOf(%s) = %s, %v", p.ID(), got.Name, ok)
		}
	}
	for id, ok := range map[string]bool{
		"gpu:gpu_time:nanoseconds:gpu_time:nanoseconds":  true,
		"gpu:gpu_time:nanoseconds:other:count":           true, // another period, same values
		"gpu:kernel_launches:count:gpu_time:nanoseconds": false,
		"process_cpu:cpu:nanoseconds":                    false,
		"gpux:gpu_time:nanoseconds:gpu_time:nanoseconds": false,
		"off_cpu:switches:count:off_cpu:nanoseconds":     false,
	} {
		if _, got := ProfileTypeOf(id); got != ok {
			t.Errorf("ProfileTypeOf(%q) ok = %v, want %v", id, got, ok)
		}
	}
	if !slices.ContainsFunc(ProfileTypes, func(p ProfileType) bool { return p.Name == DefaultProfileType.Name }) {
		t.Errorf("default %s is not listed", DefaultProfileType.Name)
	}
}

// sourceFiles calls fn with every Go file of the repository outside this
// package, test data and node_modules, by path relative to the root.
func sourceFiles(t *testing.T, fn func(rel, path string)) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// By path, not name: a checkout may itself be called schema.
			skip := name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")
			if path != root && skip || path == filepath.Join(root, "schema") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, _ := filepath.Rel(root, path)
			fn(rel, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoOtherPackageSpellsAMetricOrProfileType holds the code outside this
// package to the metric and profile type definitions: no string in it names
// a metric (or a prefix of metric names, from which one would be built), a
// profile-type id or a profile type's name. Tests are exempt: they pin what
// is on the wire.
func TestNoOtherPackageSpellsAMetricOrProfileType(t *testing.T) {
	tokens := regexp.MustCompile(MetricPrefix + `[a-z0-9_]*`)
	bad := func(s string) string {
		for _, tok := range tokens.FindAllString(s, -1) {
			if _, ok := MetricByName(tok); ok {
				return "metric " + tok
			}
			if strings.HasSuffix(tok, "_") && slices.ContainsFunc(Metrics, func(m Metric) bool { return strings.HasPrefix(m.Name, tok) }) {
				return "metric name prefix " + tok
			}
		}
		for _, p := range ProfileTypes {
			if strings.Contains(s, p.ID()) || s == p.Name {
				return "profile type " + p.Name
			}
		}
		return ""
	}
	files := 0
	sourceFiles(t, func(rel, path string) {
		if strings.HasSuffix(path, "_test.go") {
			return
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		var visit func(ast.Node) bool
		visit = func(n ast.Node) bool {
			if fl, ok := n.(*ast.Field); ok {
				// The field but not its tag: `json:"gpu"` names a key.
				ast.Inspect(fl.Type, visit)
				return false
			}
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if what := bad(s); what != "" {
				t.Errorf("%s:%d spells %s; use the schema package", rel, fset.Position(lit.Pos()).Line, what)
			}
			return true
		}
		ast.Inspect(f, visit)
	})
	if files < 100 {
		t.Fatalf("read only %d Go files", files)
	}
}

// TestNoOtherPackageSpellsAWireLabel holds the rest of the tree to this
// table: Go code outside this package must use schema.X.Label, never a
// literal. Test data and fixtures are exempt: they record what is on the wire.
func TestNoOtherPackageSpellsAWireLabel(t *testing.T) {
	var labels []string
	for _, a := range All {
		labels = append(labels, regexp.QuoteMeta(a.Label))
	}
	lit := regexp.MustCompile("[\"`](" + strings.Join(labels, "|") + ")[\"`]")
	sourceFiles(t, func(rel, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := lit.FindString(line); m != "" {
				t.Errorf("%s:%d spells wire label %s; use the schema package", rel, i+1, m)
			}
		}
	})
}
