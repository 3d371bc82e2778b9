// Package dashboards holds slurmscope's Grafana dashboards (*.json). This
// test validates them together with provisioning/ and deploy/: datasource
// uids, the slurmscope query models and their CEL filters, metrics, labels
// and profile types against package schema, alert rules, the compose file
// and the agent's systemd unit.
package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/slurmscope/slurmscope/agent/cli"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/plugin"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/querytype"
	"github.com/slurmscope/slurmscope/internal/testenv"
	"github.com/slurmscope/slurmscope/schema"
)

const (
	root       = ".."
	pluginType = "slurmscope-slurm-datasource"
	promType   = "prometheus"
	pyroType   = "grafana-pyroscope-datasource"
	exprUID    = "__expr__"
)

// ---------- loading ----------

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

type datasource struct {
	Name     string         `yaml:"name"`
	UID      string         `yaml:"uid"`
	Type     string         `yaml:"type"`
	URL      string         `yaml:"url"`
	JSONData map[string]any `yaml:"jsonData"`
}

// datasources returns the provisioned datasources by uid.
func datasources(t *testing.T) map[string]datasource {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "provisioning", "datasources", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no provisioning/datasources/*.yaml")
	}
	out := map[string]datasource{}
	for _, f := range files {
		var doc struct {
			APIVersion  int          `yaml:"apiVersion"`
			Datasources []datasource `yaml:"datasources"`
		}
		readYAML(t, f, &doc)
		if doc.APIVersion != 1 {
			t.Errorf("%s: apiVersion %d, want 1", f, doc.APIVersion)
		}
		for _, d := range doc.Datasources {
			if d.UID == "" || d.Type == "" || d.Name == "" {
				t.Errorf("%s: datasource %+v needs name, uid and type", f, d)
			}
			if _, dup := out[d.UID]; dup {
				t.Errorf("%s: duplicate uid %q", f, d.UID)
			}
			out[d.UID] = d
		}
	}
	return out
}

type dashboard struct {
	file       string
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *dsRef                   `json:"datasource"`
	Targets    []json.RawMessage        `json:"targets"`
	Panels     []panel                  `json:"panels"` // rows
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	Datasource *dsRef          `json:"datasource"`
	Query      json.RawMessage `json:"query"`
}

func dashboards(t *testing.T) []dashboard {
	t.Helper()
	files, _ := filepath.Glob("*.json")
	if len(files) < 3 {
		t.Fatalf("want the job, user and cluster dashboards, found %v", files)
	}
	var out []dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		d.file = f
		out = append(out, d)
	}
	return out
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// ---------- what the backend and the agent define ----------

// scrapeLabels are the labels Prometheus adds to every series it scrapes.
var scrapeLabels = []string{"instance", "job"}

// knownLabels are the labels PromQL in dashboards and rules may name: the
// schema's wire labels, the schema's metrics' own labels and Prometheus'.
func knownLabels() map[string]bool {
	out := map[string]bool{"__name__": true}
	for _, l := range scrapeLabels {
		out[l] = true
	}
	for _, a := range schema.All {
		out[a.Label] = true
	}
	for _, m := range schema.Metrics {
		for _, l := range m.LabelNames(true) {
			out[l] = true
		}
	}
	return out
}

// metricLabels are the labels a series of m may carry: the schema's label
// set (a MIG instance's included), and those Prometheus adds.
func metricLabels(m schema.Metric) map[string]bool {
	out := map[string]bool{"__name__": true}
	for _, l := range append(m.LabelNames(true), scrapeLabels...) {
		out[l] = true
	}
	return out
}

func TestREADMENamesOnlyTheSchemasMetrics(t *testing.T) {
	// The README's metric tables are the users' reference.
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`("+schema.MetricPrefix+`(?:gpu|job|agent|pyroscope|remote_write|cgroup)_[a-z_]+)[`+"`{]").FindAllStringSubmatch(string(readme), -1)
	if len(named) < 20 {
		t.Fatalf("found only %d metric names in the README", len(named))
	}
	for _, m := range named {
		if _, ok := schema.MetricByName(m[1]); !ok {
			t.Errorf("README names %s, which is not a metric of the schema", m[1])
		}
	}
}

// TestREADMEDocumentsEveryMetric: every metric the agent exports (the
// schema's; TestAgentExportsTheSchemasMetrics holds the agent to them) has
// a row of one of the README's tables, named in full.
func TestREADMEDocumentsEveryMetric(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range regexp.MustCompile("`("+schema.MetricPrefix+`[a-z_]+)[`+"`{]").FindAllStringSubmatch(line, -1) {
			rows[m[1]] = true
		}
	}
	for _, m := range schema.Metrics {
		if !rows[m.Name] {
			t.Errorf("%s is exported but named in no table of the README", m.Name)
		}
	}
}

// ---------- template variables ----------

var varRE = regexp.MustCompile(`\$\{(\w+)(?::([\w]+))?\}|\$(\w+)`)

// sample values for variables, hostile on purpose: they must stay one
// string literal after interpolation.
var samples = []string{"4242", `a"b\c`, "x\"} or {a=\"b"}

// substitute replaces variable references in s as Grafana would with the
// given values, and reports references that are undefined or use a format
// unfit for lang ("cel" or "promql").
func substitute(t *testing.T, where, s, lang string, vars map[string]variable) string {
	t.Helper()
	return varRE.ReplaceAllStringFunc(s, func(ref string) string {
		m := varRE.FindStringSubmatch(ref)
		name, format := m[1], m[2]
		if name == "" {
			name = m[3]
		}
		if strings.HasPrefix(name, "__") { // Grafana's built-ins
			switch name {
			case "__range", "__interval", "__rate_interval":
				return "1h"
			case "__range_s":
				return "3600"
			}
			t.Errorf("%s: unknown built-in variable %s", where, ref)
			return ref
		}
		v, ok := vars[name]
		if !ok {
			t.Errorf("%s: variable %s is not defined", where, ref)
			return ref
		}
		switch lang {
		case "cel":
			// The datasource front end CEL-escapes every variable
			// (src/interpolate.ts) and ignores explicit
			// formats, which would only mislead a reader.
			if format != "" {
				t.Errorf("%s: write %s as $%s: the datasource CEL-escapes variables itself and ignores formats", where, ref, name)
			}
			// Sample values as the front end renders them: JSON strings
			// are valid CEL strings; a multi-value variable becomes a
			// list, which filters must use with `in`.
			var b []byte
			if v.Multi || v.IncludeAll {
				b, _ = json.Marshal(samples)
			} else {
				b, _ = json.Marshal(samples[1])
			}
			return string(b)
		case "promql":
			if format != "doublequote" || v.Multi || v.IncludeAll {
				t.Errorf("%s: %s in PromQL must be a single-value variable in ${%s:doublequote}", where, ref, name)
			}
			return `"bob"`
		}
		return ref
	})
}

// ---------- slurmscope query models ----------

// target is what the tests below read of a slurmscope query model, of
// whichever type.
type target struct {
	plugin.Model
	ProfileType string `json:"profileType"`
	Metric      string `json:"metric"`
	Entity      string `json:"entity"`
	RankBy      string `json:"rankBy"`
	// A diff's sides, CEL like the filter.
	LeftFilter  string `json:"leftFilter"`
	RightFilter string `json:"rightFilter"`
}

// sideFilters are the fields of a query model that hold CEL besides
// filter: a diff's sides.
var sideFilters = []string{"leftFilter", "rightFilter"}

func checkSlurmscope(t *testing.T, where string, raw json.RawMessage, vars map[string]variable) {
	t.Helper()
	var m target
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	if !slices.Contains(querytype.Names(), m.QueryType) {
		t.Errorf("%s: queryType %q, want one of %v", where, m.QueryType, querytype.Names())
		return
	}
	checkCEL(t, where+" filter", m.Filter, vars)
	// The type's fields, checked as the datasource checks them, with
	// variables in its other CEL fields substituted as in the filter.
	var model map[string]any
	_ = json.Unmarshal(raw, &model)
	for _, name := range sideFilters {
		if src, ok := model[name].(string); ok && src != "" {
			model[name] = checkCEL(t, where+" "+name, src, vars)
		}
	}
	sub, _ := json.Marshal(model)
	if _, err := querytype.Parse(m.QueryType, sub); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	// A dashboard names what the datasource would otherwise default: the
	// profile type from the schema, the metric.
	fields := querytype.FieldNames(m.QueryType)
	if _, ok := schema.ProfileTypeOf(m.ProfileType); slices.Contains(fields, "profileType") && !ok {
		t.Errorf("%s: profileType %q is not a profile type of the schema", where, m.ProfileType)
	}
	if slices.Contains(fields, "metric") && m.Metric == "" {
		t.Errorf("%s: no metric", where)
	}
}

// checkCEL checks one CEL field after substituting its variables, and
// returns it substituted.
func checkCEL(t *testing.T, where, cel string, vars map[string]variable) string {
	t.Helper()
	src := substitute(t, where, cel, "cel", vars)
	f, err := filter.Compile(src)
	if err != nil {
		t.Errorf("%s %q (as %q): %v", where, cel, src, err)
	} else if err := f.Err(); err != nil {
		t.Errorf("%s %q: %v", where, cel, err)
	}
	return src
}

// ---------- PromQL ----------

var (
	stringRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	identRE  = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	selRE    = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{`)
	groupRE  = regexp.MustCompile(`\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	labelRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// checkPromQL checks that expr names only metrics of the schema (and
// Prometheus' up), that each selector's matchers name labels its metric
// carries, and that every label the expression groups or joins on is
// carried by one of its metrics.
func checkPromQL(t *testing.T, where, expr string) {
	t.Helper()
	if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
		t.Errorf("%s: unbalanced brackets in %q", where, expr)
	}
	bare := stringRE.ReplaceAllString(expr, `""`)
	carried := map[string]bool{}
	n := 0
	for _, id := range identRE.FindAllString(bare, -1) {
		if !strings.HasPrefix(id, schema.MetricPrefix) {
			continue
		}
		n++
		m, ok := schema.MetricByName(id)
		if !ok {
			t.Errorf("%s: metric %s is not a metric of the schema", where, id)
			continue
		}
		for l := range metricLabels(m) {
			carried[l] = true
		}
	}
	for _, l := range scrapeLabels {
		carried[l] = true
	}
	for _, m := range selRE.FindAllStringSubmatchIndex(bare, -1) {
		name := bare[m[2]:m[3]]
		labels := map[string]bool{"__name__": true, "instance": true, "job": true}
		if name == "up" {
			n++
		} else if def, ok := schema.MetricByName(name); ok {
			labels = metricLabels(def)
		} else {
			t.Errorf("%s: selector on %s, not a metric of the schema", where, name)
			continue
		}
		end := strings.IndexByte(bare[m[1]:], '}')
		if end < 0 {
			continue
		}
		for _, l := range labelRE.FindAllStringSubmatch(bare[m[1]:m[1]+end], -1) {
			if !labels[l[1]] {
				t.Errorf("%s: %s has no label %q", where, name, l[1])
			}
		}
	}
	if n == 0 {
		t.Errorf("%s: %q names no slurmscope metric", where, expr)
	}
	for _, m := range groupRE.FindAllStringSubmatch(bare, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !carried[l] {
				t.Errorf("%s: groups or joins on %q, which none of its metrics carries", where, l)
			}
		}
	}
}

// ---------- tests ----------

func TestDashboards(t *testing.T) {
	ds := datasources(t)
	uids := map[string]string{}
	for _, d := range dashboards(t) {
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: needs uid and title", d.file)
		}
		if prev, dup := uids[d.UID]; dup {
			t.Errorf("%s: uid %q also in %s", d.file, d.UID, prev)
		}
		uids[d.UID] = d.file
		vars := map[string]variable{}
		for _, v := range d.Templating.List {
			where := d.file + ": variable " + v.Name
			if v.Type == "query" {
				if v.Datasource == nil || ds[v.Datasource.UID].Type != pluginType {
					t.Errorf("%s: query variables come from the slurmscope datasource", where)
				} else {
					var m plugin.Model
					if err := json.Unmarshal(v.Query, &m); err != nil || m.QueryType != querytype.AttributeValues {
						t.Errorf("%s: query %s: want an attributeValues query model", where, v.Query)
					}
					// Variables resolve in order: a filter may only use
					// variables defined above it.
					checkSlurmscope(t, where, v.Query, vars)
				}
			}
			vars[v.Name] = v
		}
		ids := map[int]bool{}
		panels := allPanels(d.Panels)
		if len(panels) == 0 {
			t.Errorf("%s: no panels", d.file)
		}
		for _, p := range panels {
			where := d.file + ": panel " + p.Title
			if ids[p.ID] {
				t.Errorf("%s: duplicate panel id %d", where, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: gridPos %+v", where, p.GridPos)
			}
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil {
				t.Errorf("%s: no datasource", where)
				continue
			}
			if _, ok := ds[p.Datasource.UID]; !ok {
				t.Errorf("%s: datasource uid %q is not provisioned", where, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			for _, raw := range p.Targets {
				var tg struct {
					RefID      string `json:"refId"`
					Datasource *dsRef `json:"datasource"`
					Expr       string `json:"expr"`
				}
				if err := json.Unmarshal(raw, &tg); err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				w := where + " query " + tg.RefID
				ref := p.Datasource
				if tg.Datasource != nil {
					ref = tg.Datasource
				}
				src, ok := ds[ref.UID]
				if !ok {
					t.Errorf("%s: datasource uid %q is not provisioned", w, ref.UID)
					continue
				}
				if ref.Type != "" && ref.Type != src.Type {
					t.Errorf("%s: datasource %q has type %s, not %s", w, ref.UID, src.Type, ref.Type)
				}
				switch src.Type {
				case pluginType:
					checkSlurmscope(t, w, raw, vars)
				case promType:
					checkPromQL(t, w, substitute(t, w, tg.Expr, "promql", vars))
				}
			}
		}
	}
}

func jobDashboard(t *testing.T) dashboard {
	t.Helper()
	for _, d := range dashboards(t) {
		if d.UID == "slurmscope-job" {
			return d
		}
	}
	t.Fatal("no dashboard with uid slurmscope-job")
	return dashboard{}
}

// The dashboards cover what the job dashboard is for.
func TestJobDashboardCoverage(t *testing.T) {
	job := jobDashboard(t)
	var profileTypes, metrics, types []string
	for _, p := range allPanels(job.Panels) {
		for _, raw := range p.Targets {
			var m target
			_ = json.Unmarshal(raw, &m)
			profileTypes = append(profileTypes, m.ProfileType)
			metrics = append(metrics, m.Metric)
			types = append(types, m.QueryType)
		}
	}
	// The host side next to the GPUs, and the findings table.
	for _, want := range []schema.Metric{schema.HostCPUUsage.Job, schema.HostCPUs.Job, schema.HostMemoryUsed.Job,
		schema.HostMemoryPeak.Job, schema.HostMemoryLimit.Job, schema.HostOOMKills.Job, schema.HostCPUUsage.Step} {
		if !slices.Contains(metrics, want.Name) {
			t.Errorf("job dashboard has no %s panel", want.Name)
		}
	}
	if !slices.Contains(types, querytype.Findings) {
		t.Error("job dashboard has no findings table")
	}
	for _, want := range []string{schema.ProcessCPU.ID(), schema.OffCPU.ID(), schema.GPUTime.ID()} {
		if !slices.Contains(profileTypes, want) {
			t.Errorf("job dashboard has no %s query", want)
		}
	}
	for _, want := range []schema.Metric{schema.JobGPUUtilization, schema.JobGPUMemoryUsed, schema.GPUSMActive, schema.GPUTensorActive, schema.JobInfo} {
		if !slices.Contains(metrics, want.Name) {
			t.Errorf("job dashboard has no %s panel", want.Name)
		}
	}
}

// Where the job ran and where its threads blocked sit side by side: its
// CPU flame graph and its off-CPU (blocked) one, the same size on one
// row. No panel of the dashboard covers another.
func TestJobDashboardFlameGraphsSideBySide(t *testing.T) {
	flames := map[string]panel{}
	var placed []panel
	for _, p := range allPanels(jobDashboard(t).Panels) {
		placed = append(placed, p)
		if p.Type != "flamegraph" {
			continue
		}
		for _, raw := range p.Targets {
			var m target
			_ = json.Unmarshal(raw, &m)
			if m.QueryType == querytype.Flamegraph {
				flames[m.ProfileType] = p
			}
		}
	}
	cpu, off := flames[schema.ProcessCPU.ID()], flames[schema.OffCPU.ID()]
	if cpu.Type == "" || off.Type == "" {
		t.Fatalf("flame graphs by profile type: %v", flames)
	}
	c, o := cpu.GridPos, off.GridPos
	if c.Y != o.Y || c.H != o.H || c.W != o.W || c.X+c.W != o.X {
		t.Errorf("CPU flame graph at %+v, off-CPU one at %+v: want them side by side, the same size", c, o)
	}
	for i, a := range placed {
		for _, b := range placed[i+1:] {
			g, h := a.GridPos, b.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q %+v and %q %+v overlap", a.Title, g, b.Title, h)
			}
		}
	}
}

// dashboardByUID returns the dashboard of uid.
func dashboardByUID(t *testing.T, uid string) dashboard {
	t.Helper()
	for _, d := range dashboards(t) {
		if d.UID == uid {
			return d
		}
	}
	t.Fatalf("no dashboard with uid %s", uid)
	return dashboard{}
}

// varAttribute is the attribute whose values a query variable lists.
func varAttribute(v variable) string {
	var q struct{ Attribute string }
	_ = json.Unmarshal(v.Query, &q)
	return q.Attribute
}

// diffTargets are the dashboard's diff queries, by the id of their panel.
func diffTargets(d dashboard) map[int][]target {
	out := map[int][]target{}
	for _, p := range allPanels(d.Panels) {
		for _, raw := range p.Targets {
			var m target
			_ = json.Unmarshal(raw, &m)
			if m.QueryType == querytype.Diff {
				out[p.ID] = append(out[p.ID], m)
			}
		}
	}
	return out
}

// panelLinks are the data links of each panel of the dashboard's file,
// by panel id.
func panelLinks(t *testing.T, d dashboard) map[int][]string {
	t.Helper()
	b, err := os.ReadFile(d.file)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Panels []struct {
			ID          int `json:"id"`
			FieldConfig struct {
				Defaults struct {
					Links []struct{ URL string } `json:"links"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[int][]string{}
	for _, p := range doc.Panels {
		for _, l := range p.FieldConfig.Defaults.Links {
			out[p.ID] = append(out[p.ID], l.URL)
		}
	}
	return out
}

// The job dashboard shows each rank's time, so that a straggler stands
// out, and a click on a rank opens the diff of that rank (the $rank
// variable) against the job's other ranks.
func TestJobDashboardRanks(t *testing.T) {
	job := jobDashboard(t)
	var rank *variable
	for i, v := range job.Templating.List {
		if v.Name == "rank" {
			rank = &job.Templating.List[i]
		}
	}
	if rank == nil || rank.Multi || rank.IncludeAll || varAttribute(*rank) != schema.TaskRank.Name {
		t.Fatalf("want a single-value $rank variable of %s, got %+v", schema.TaskRank.Name, rank)
	}
	diffs := diffTargets(job)
	rankVsRest := 0
	for id, ts := range diffs {
		for _, m := range ts {
			if strings.Contains(m.LeftFilter, schema.TaskRank.Name+" != $rank") && strings.Contains(m.RightFilter, schema.TaskRank.Name+" == $rank") {
				rankVsRest = id
			}
		}
	}
	if rankVsRest == 0 {
		t.Fatalf("no diff of $rank (right) against the other ranks (left): %+v", diffs)
	}
	links := panelLinks(t, job)
	perRank := false
	for _, p := range allPanels(job.Panels) {
		for _, raw := range p.Targets {
			var m target
			_ = json.Unmarshal(raw, &m)
			if m.QueryType != querytype.TopEntities || m.Entity != schema.TaskRank.Name || m.RankBy != string(query.ByCPUTime) {
				continue
			}
			perRank = true
			want := fmt.Sprintf("viewPanel=%d", rankVsRest)
			if !slices.ContainsFunc(links[p.ID], func(u string) bool {
				return strings.Contains(u, "/d/"+job.UID+"/") && strings.Contains(u, "var-rank=${__data.fields[\"slurm.task.rank\"]}") && strings.HasSuffix(u, want)
			}) {
				t.Errorf("panel %q: no link to the diff of its rank (%s): %q", p.Title, want, links[p.ID])
			}
		}
	}
	if !perRank {
		t.Error("job dashboard has no CPU time per rank panel")
	}
}

// The comparison dashboard takes two job ids and compares them, CPU and
// blocked time; the job dashboard links to it.
func TestCompareDashboard(t *testing.T) {
	d := dashboardByUID(t, "slurmscope-compare")
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	for _, name := range []string{"left", "right"} {
		v, ok := vars[name]
		if !ok || v.Multi || v.IncludeAll || varAttribute(v) != schema.JobID.Name {
			t.Errorf("want a single-value $%s variable of %s, got %s", name, schema.JobID.Name, v.Query)
		}
	}
	types := map[string]bool{}
	for _, ts := range diffTargets(d) {
		for _, m := range ts {
			if m.LeftFilter == schema.JobID.Name+" == $left" && m.RightFilter == schema.JobID.Name+" == $right" {
				types[m.ProfileType] = true
			}
		}
	}
	for _, pt := range []string{schema.ProcessCPU.ID(), schema.OffCPU.ID()} {
		if !types[pt] {
			t.Errorf("no diff of job $right against job $left in %s", pt)
		}
	}
	b, err := os.ReadFile(jobDashboard(t).file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "/d/"+d.UID+"/") {
		t.Error("the job dashboard does not link to the comparison dashboard")
	}
}

// The cluster dashboard ranks users by what they held and did not use.
func TestClusterDashboardRanksWaste(t *testing.T) {
	ranks := map[string]bool{}
	for _, d := range dashboards(t) {
		if d.UID != "slurmscope-cluster" {
			continue
		}
		for _, p := range allPanels(d.Panels) {
			for _, raw := range p.Targets {
				var m target
				_ = json.Unmarshal(raw, &m)
				if m.QueryType == querytype.TopEntities && m.Entity == schema.JobUser.Name {
					ranks[m.RankBy] = true
				}
			}
		}
	}
	for _, r := range []query.Rank{query.ByWastedCoreHours, query.ByWastedGPUHours} {
		if !ranks[string(r)] {
			t.Errorf("the cluster dashboard does not rank users by %s", r)
		}
	}
}

func TestDashboardProvider(t *testing.T) {
	var doc struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name    string `yaml:"name"`
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(root, "provisioning", "dashboards", "slurmscope.yaml"), &doc)
	if doc.APIVersion != 1 || len(doc.Providers) != 1 || doc.Providers[0].Type != "file" {
		t.Fatalf("provider: %+v", doc)
	}
	// The compose file must mount dashboards/ where the provider reads.
	mounts := composeMounts(t)["grafana"]
	if mounts["../dashboards"] != doc.Providers[0].Options.Path {
		t.Errorf("dashboards/ is mounted at %q, the provider reads %q", mounts["../dashboards"], doc.Providers[0].Options.Path)
	}
}

func TestDatasources(t *testing.T) {
	ds := datasources(t)
	for uid, typ := range map[string]string{"slurmscope": pluginType, "prometheus": promType, "pyroscope": pyroType} {
		if ds[uid].Type != typ {
			t.Errorf("datasource %q: type %q, want %s", uid, ds[uid].Type, typ)
		}
	}
	// The plugin's jsonData must be what its settings parser reads.
	b, _ := json.Marshal(ds["slurmscope"].JSONData)
	var s plugin.Settings
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Errorf("slurmscope jsonData: %v", err)
	}
	if s.Pyroscope.URL == "" || s.Prometheus.URL == "" {
		t.Errorf("slurmscope jsonData: want both backend URLs, got %+v", s)
	}
	if s.DefaultProfileType != "" && s.DefaultProfileType != schema.DefaultProfileType.ID() {
		t.Errorf("defaultProfileType %q", s.DefaultProfileType)
	}
	// The plugin id is the datasource type.
	var pj struct{ ID string }
	b, err := os.ReadFile(filepath.Join(root, "src", "plugin.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pj); err != nil || pj.ID != pluginType {
		t.Errorf("plugin.json id %q, want %s (%v)", pj.ID, pluginType, err)
	}
}

func TestAlertRules(t *testing.T) {
	ds := datasources(t)
	labels := knownLabels()
	files, _ := filepath.Glob(filepath.Join(root, "provisioning", "alerting", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no provisioning/alerting/*.yaml")
	}
	type rule struct {
		UID       string `yaml:"uid"`
		Title     string `yaml:"title"`
		Condition string `yaml:"condition"`
		For       string `yaml:"for"`
		Data      []struct {
			RefID         string         `yaml:"refId"`
			DatasourceUID string         `yaml:"datasourceUid"`
			Model         map[string]any `yaml:"model"`
		} `yaml:"data"`
		Annotations map[string]string `yaml:"annotations"`
	}
	var rules []rule
	for _, f := range files {
		var doc struct {
			APIVersion int `yaml:"apiVersion"`
			Groups     []struct {
				OrgID    int    `yaml:"orgId"`
				Name     string `yaml:"name"`
				Folder   string `yaml:"folder"`
				Interval string `yaml:"interval"`
				Rules    []rule `yaml:"rules"`
			} `yaml:"groups"`
		}
		readYAML(t, f, &doc)
		if doc.APIVersion != 1 {
			t.Errorf("%s: apiVersion %d", f, doc.APIVersion)
		}
		for _, g := range doc.Groups {
			if g.Name == "" || g.Folder == "" || g.OrgID == 0 {
				t.Errorf("%s: group %q needs name, folder and orgId", f, g.Name)
			}
			if _, err := time.ParseDuration(g.Interval); err != nil {
				t.Errorf("%s: group %q interval: %v", f, g.Name, err)
			}
			rules = append(rules, g.Rules...)
		}
	}
	seen := map[string]bool{}
	for _, r := range rules {
		where := "rule " + r.UID
		if r.UID == "" || r.Title == "" || seen[r.UID] {
			t.Errorf("%s: needs a unique uid and a title", where)
		}
		seen[r.UID] = true
		if _, err := time.ParseDuration(r.For); err != nil {
			t.Errorf("%s: for: %v", where, err)
		}
		refs := map[string]bool{}
		var exprs []string
		kept := map[string]bool{} // labels the slurmscope queries' numbers carry
		for _, q := range r.Data {
			refs[q.RefID] = true
			if q.DatasourceUID == exprUID {
				if e, _ := q.Model["expression"].(string); e == "" {
					t.Errorf("%s: expression %s names no input", where, q.RefID)
				}
				continue
			}
			src, ok := ds[q.DatasourceUID]
			if !ok {
				t.Errorf("%s: datasource uid %q is not provisioned", where, q.DatasourceUID)
				continue
			}
			switch src.Type {
			case promType:
				expr, _ := q.Model["expr"].(string)
				checkPromQL(t, where, expr)
				exprs = append(exprs, expr)
			case pluginType:
				b, _ := json.Marshal(q.Model)
				checkSlurmscope(t, where, b, nil)
				var m plugin.Model
				_ = json.Unmarshal(b, &m)
				q, err := querytype.Parse(m.QueryType, b)
				if err != nil {
					continue // checkSlurmscope said why
				}
				if sh := q.Shape(); sh.Alertable() {
					for _, l := range sh.Labels {
						kept[l] = true
					}
				} else {
					t.Errorf("%s: a %s query (%s) gives alert rules no numbers to evaluate", where, m.QueryType, b)
				}
			default:
				t.Errorf("%s: datasource %s cannot be alerted on here", where, src.Type)
			}
		}
		for _, q := range r.Data {
			if e, _ := q.Model["expression"].(string); q.DatasourceUID == exprUID && !refs[e] {
				t.Errorf("%s: expression %s reads %q, which is not a query of the rule", where, q.RefID, e)
			}
		}
		if !refs[r.Condition] {
			t.Errorf("%s: condition %q is not a refId", where, r.Condition)
		}
		// The summary names the user, job or node: a label the query keeps.
		sum := r.Annotations["summary"]
		ls := summaryLabels(sum)
		if len(ls) == 0 {
			t.Errorf("%s: summary %q names no label", where, sum)
		}
		for _, l := range ls {
			kept := kept[l] || labels[l] && strings.Contains(strings.Join(exprs, " "), l) || l == "instance"
			if !kept {
				t.Errorf("%s: summary uses label %s, which the query does not keep", where, l)
			}
		}
	}
	// The rules the issue asks for.
	var summaries []string
	for _, r := range rules {
		summaries = append(summaries, r.Annotations["summary"])
	}
	var named []string
	for _, s := range summaries {
		named = append(named, summaryLabels(s)...)
	}
	for _, a := range []schema.Attribute{schema.JobUser, schema.JobID, schema.HostName} {
		if !slices.Contains(named, a.Label) && !slices.Contains(named, a.Name) {
			t.Errorf("no alert summary names %s", a.Name)
		}
	}
	// One rule alerts on a finding.
	found := false
	for _, r := range rules {
		for _, q := range r.Data {
			if q.DatasourceUID == "slurmscope" && q.Model["queryType"] == querytype.Findings {
				found = true
			}
		}
	}
	if !found {
		t.Error("no alert rule uses a finding")
	}
}

// summaryLabels are the labels a summary names, as {{ $labels.x }} (wire
// labels) or {{ index $labels "x" }} (the datasource's dotted names).
func summaryLabels(sum string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\$labels\.(\w+)|index \$labels "([\w.]+)"`).FindAllStringSubmatch(sum, -1) {
		out = append(out, m[1]+m[2])
	}
	return out
}

// composeMounts returns, per service, host path -> container path, after
// checking the compose file's structure.
func composeMounts(t *testing.T) map[string]map[string]string {
	t.Helper()
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
			Command     []string          `yaml:"command"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	dir := filepath.Join(root, "deploy")
	readYAML(t, filepath.Join(dir, "docker-compose.yaml"), &doc)
	out := map[string]map[string]string{}
	for _, name := range []string{"grafana", "pyroscope", "prometheus"} {
		s, ok := doc.Services[name]
		if !ok {
			t.Errorf("compose: no service %s", name)
			continue
		}
		if s.Image == "" || len(s.Ports) == 0 {
			t.Errorf("compose: %s needs an image and a port", name)
		}
		out[name] = map[string]string{}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("compose: %s volume %q", name, v)
				continue
			}
			host := parts[0]
			out[name][host] = parts[1]
			if strings.HasPrefix(host, ".") || strings.HasPrefix(host, "/") {
				p := filepath.Join(dir, host)
				// The plugin's dist/ exists only after a build.
				if host == "../dist" {
					p = filepath.Join(dir, "../src/plugin.json")
				}
				if _, err := os.Stat(p); err != nil {
					t.Errorf("compose: %s mounts %s, which is not in the repository", name, host)
				}
			} else if _, ok := doc.Volumes[host]; !ok {
				t.Errorf("compose: %s uses undeclared volume %s", name, host)
			}
		}
	}
	g := doc.Services["grafana"]
	if g.Environment["GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS"] != pluginType {
		t.Errorf("compose: grafana must allow the unsigned plugin %s", pluginType)
	}
	// The Grafana started must be one the plugin declares it runs on.
	var pj struct {
		Dependencies struct {
			Grafana string `json:"grafanaDependency"`
		} `json:"dependencies"`
	}
	if b, err := os.ReadFile(filepath.Join(root, "src/plugin.json")); err != nil || json.Unmarshal(b, &pj) != nil {
		t.Errorf("plugin.json: %v", err)
	}
	minMajor := regexp.MustCompile(`^>=(\d+)\.`).FindStringSubmatch(pj.Dependencies.Grafana)
	tag := regexp.MustCompile(`^grafana/grafana(?:-oss)?:(\d+)\.`).FindStringSubmatch(g.Image)
	if minMajor == nil || tag == nil {
		t.Errorf("compose: grafana image %q or plugin.json grafanaDependency %q is not a plain version", g.Image, pj.Dependencies.Grafana)
	} else if a, b := atoi(tag[1]), atoi(minMajor[1]); a < b {
		t.Errorf("compose: grafana image %s is older than the plugin's grafanaDependency %s", g.Image, pj.Dependencies.Grafana)
	}
	if !slices.Contains(doc.Services["prometheus"].Command, "--web.enable-remote-write-receiver") {
		t.Error("compose: prometheus needs --web.enable-remote-write-receiver for the agents' remote write")
	}
	return out
}

func TestCompose(t *testing.T) {
	m := composeMounts(t)["grafana"]
	want := map[string]string{
		"../dist":                     "/var/lib/grafana/plugins/" + pluginType,
		"../provisioning/datasources": "/etc/grafana/provisioning/datasources",
		"../provisioning/dashboards":  "/etc/grafana/provisioning/dashboards",
		"../provisioning/alerting":    "/etc/grafana/provisioning/alerting",
	}
	for host, ctr := range want {
		if m[host] != ctr {
			t.Errorf("compose: grafana mounts %s at %q, want %s", host, m[host], ctr)
		}
	}
	// Prometheus' config scrapes the agents under the job the alert matches.
	var prom struct {
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(root, "deploy", "prometheus.yml"), &prom)
	if len(prom.ScrapeConfigs) == 0 || prom.ScrapeConfigs[0].JobName != "slurmscope-agent" {
		t.Errorf("prometheus.yml: want a slurmscope-agent scrape job, got %+v", prom)
	}
}

// ---------- systemd ----------

func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join(root, "deploy", "slurmscope-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]map[string][]string{}
	cur := ""
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			cur = strings.Trim(line, "[]")
			sections[cur] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == "" {
				t.Fatalf("unit: bad line %q", line)
			}
			sections[cur][k] = append(sections[cur][k], v)
		}
	}
	svc := sections["Service"]
	// A configuration error exits 2 (cli.Main) and is not restarted.
	for k, want := range map[string]string{"Restart": "on-failure", "RestartPreventExitStatus": "2", "User": "root",
		"EnvironmentFile": "/etc/slurmscope/agent.env", "UMask": "0077", "ProtectSystem": "strict"} {
		if len(svc[k]) != 1 || svc[k][0] != want {
			t.Errorf("unit: %s=%v, want %s", k, svc[k], want)
		}
	}
	if len(sections["Install"]["WantedBy"]) == 0 || len(svc["CapabilityBoundingSet"]) != 1 {
		t.Fatal("unit: want [Install] WantedBy and one CapabilityBoundingSet")
	}
	if len(sections["Unit"]["StartLimitBurst"]) == 0 || len(sections["Unit"]["StartLimitIntervalSec"]) == 0 {
		t.Error("unit: want a start limit (StartLimitBurst, StartLimitIntervalSec)")
	}
	// What the agent uses: kernel symbols (kallsyms reads as zeros
	// without CAP_SYSLOG) and its table loaders' priority (CAP_SYS_NICE).
	caps := strings.Fields(svc["CapabilityBoundingSet"][0])
	for _, c := range []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_SYSLOG", "CAP_SYS_NICE"} {
		if !slices.Contains(caps, c) {
			t.Errorf("unit: CapabilityBoundingSet lacks %s", c)
		}
	}
	if len(svc["ExecStart"]) != 1 {
		t.Fatalf("unit: ExecStart %v", svc["ExecStart"])
	}
	env := envFile(t, filepath.Join(root, "deploy", "slurmscope-agent.env"))
	args := strings.Fields(svc["ExecStart"][0])
	if len(args) < 2 || filepath.Base(args[0]) != "slurmscope-agent" || args[1] != "run" {
		t.Fatalf("unit: ExecStart %q: want slurmscope-agent run ...", svc["ExecStart"][0])
	}
	// systemd splits $VAR at whitespace; an unset one adds nothing, and
	// the example names it in a comment.
	b, _ := os.ReadFile(filepath.Join(root, "deploy", "slurmscope-agent.env"))
	var flags []string
	for _, a := range args[2:] {
		if strings.HasPrefix(a, "$") {
			name := strings.Trim(a, "${}")
			v, ok := env[name]
			if !ok && !strings.Contains(string(b), "\n#"+name+"=") {
				t.Errorf("unit: %s is neither set nor shown in slurmscope-agent.env", a)
			}
			flags = append(flags, strings.Fields(v)...)
		} else {
			flags = append(flags, a)
		}
	}
	// systemd does not expand variables in an EnvironmentFile: a value
	// that names one, set or commented out, passes "$X" to the agent.
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "#"), "="); ok && !strings.Contains(k, " ") && strings.Contains(v, "$") {
			t.Errorf("slurmscope-agent.env: %q names a variable, which systemd does not expand", line)
		}
	}
	// One metrics path by default: /metrics on loopback with remote
	// write, or scraped from every node, never both (each series twice).
	var exposed, pushed bool
	for _, f := range flags {
		if a, ok := strings.CutPrefix(f, "--metrics-addr="); ok {
			host, _, _ := strings.Cut(a, ":")
			exposed = host != "127.0.0.1" && host != "localhost" && host != "[::1]"
		}
		pushed = pushed || strings.HasPrefix(f, "--prometheus-remote-write-url=")
	}
	if exposed && pushed {
		t.Error("slurmscope-agent.env: /metrics is served beyond loopback and pushed by remote write: each series twice")
	}
	// Every flag must be one that `slurmscope-agent run` has.
	var stdout, stderr bytes.Buffer
	cli.Main([]string{"run", "--help"}, &stdout, &stderr)
	help := stdout.String() + stderr.String()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([\w.-]+)`).FindAllStringSubmatch(help, -1) {
		known[m[1]] = true
	}
	if len(known) < 10 {
		t.Fatalf("could not read the run flags from --help:\n%s", help)
	}
	if len(flags) == 0 {
		t.Error("unit: ExecStart passes no flags")
	}
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if !strings.HasPrefix(f, "-") || !known[name] {
			t.Errorf("unit: %q is not a flag of slurmscope-agent run", f)
		}
	}
	// The example's commented-out flags must exist too.
	for _, m := range regexp.MustCompile(`--([a-z][a-z0-9.-]*[a-z0-9])`).FindAllStringSubmatch(string(b), -1) {
		if m[1] != "help" && !known[m[1]] {
			t.Errorf("slurmscope-agent.env: --%s is not a flag of slurmscope-agent run", m[1])
		}
	}
}

// TestSystemdUnitSecurity holds the unit's hardening to systemd's own
// rating: under 5 ("OK"; it was 7.5 "EXPOSED"), read from the file
// without a running systemd.
func TestSystemdUnitSecurity(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Tools("systemd-analyze"))
	out, err := exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager",
		filepath.Join(root, "deploy", "slurmscope-agent.service")).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("exposure %.1f", level)
	if level >= 5 {
		t.Errorf("systemd-analyze security rates the unit %.1f, want under 5:\n%s", level, out)
	}
}

// envFile reads KEY="value" lines as systemd does (no expansion).
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: bad line %q", path, line)
			continue
		}
		out[k] = strings.Trim(v, `"`)
	}
	return out
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
