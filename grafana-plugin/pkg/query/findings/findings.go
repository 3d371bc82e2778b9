// Package findings turns what a job used (its cgroups' host metrics and its
// GPUs' metrics over a range) into efficiency findings a user can act on:
// GPUs allocated but idle, CPUs allocated but unused, memory requested far
// above the peak or close to the limit, OOM kills, GPU memory mostly
// unused, GPUs starved by saturated CPUs, and ranks of a multi-rank job
// that straggle (stragglers.go). Each finding has a severity, the numbers
// behind it and one line of advice. Where the job has off-CPU profiles,
// unused CPUs also name where its threads blocked (waits.go).
//
// Evaluate is a pure function of its input and the thresholds; the query
// engine gathers the input, and the datasource, its alerts and `slurmscope
// job` all take their findings from it.
package findings

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Kind names a finding (the query model's "finding").
type Kind string

const (
	GPUIdle             Kind = "gpuIdle"
	CPUUnderused        Kind = "cpuUnderused"
	MemoryOverRequested Kind = "memoryOverRequested"
	MemoryNearLimit     Kind = "memoryNearLimit"
	OOMKilled           Kind = "oomKilled"
	GPUMemoryUnderused  Kind = "gpuMemoryUnderused"
	InputBound          Kind = "inputBound"
	Straggler           Kind = "straggler"
)

// Kinds lists every finding, in the order they are reported within a
// severity.
var Kinds = []Kind{OOMKilled, GPUIdle, InputBound, Straggler, CPUUnderused, MemoryNearLimit, MemoryOverRequested, GPUMemoryUnderused}

// ParseKind accepts a Kind; "" is every kind.
func ParseKind(s string) (Kind, error) {
	if s == "" || slices.Contains(Kinds, Kind(s)) {
		return Kind(s), nil
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("finding %q: want one of %s", s, strings.Join(names, ", "))
}

// Severity orders findings: a critical one costs the job or the cluster
// now (a kill, GPUs held for nothing), a warning wastes a good share of
// what was allocated, info is worth knowing.
type Severity string

const (
	Critical Severity = "critical"
	Warning  Severity = "warning"
	Info     Severity = "info"
)

func (s Severity) rank() int {
	switch s {
	case Critical:
		return 0
	case Warning:
		return 1
	}
	return 2
}

// Thresholds are the settings findings are judged by. "Below" fires
// strictly below the value; "Above" at or above it, but for
// StragglerAbove, which fires strictly above. Zero fields take Defaults'
// values.
type Thresholds struct {
	// CPUEfficiencyBelow: cores used over cores allocated.
	CPUEfficiencyBelow float64 `json:"cpuEfficiencyBelow,omitempty"`
	// MemoryUsedBelow and MemoryUsedAbove: peak memory over the limit
	// (the request), on the job's busiest node.
	MemoryUsedBelow float64 `json:"memoryUsedBelow,omitempty"`
	MemoryUsedAbove float64 `json:"memoryUsedAbove,omitempty"`
	// GPUIdleBelow: a GPU whose highest utilisation stayed below this.
	GPUIdleBelow float64 `json:"gpuIdleBelow,omitempty"`
	// GPUMemoryUsedBelow: the job's peak device memory over the device's,
	// on its fullest GPU.
	GPUMemoryUsedBelow float64 `json:"gpuMemoryUsedBelow,omitempty"`
	// GPUUtilizationBelow with CPUSaturatedAbove: GPUs this little busy on
	// average while the job's CPUs are this busy wait for their input.
	GPUUtilizationBelow float64 `json:"gpuUtilizationBelow,omitempty"`
	CPUSaturatedAbove   float64 `json:"cpuSaturatedAbove,omitempty"`
	// StragglerAbove: a rank whose time in one of its job's top functions
	// is more than this many times the median rank's there. A ratio,
	// above 1, unlike the shares above.
	StragglerAbove float64 `json:"stragglerAbove,omitempty"`
}

// Defaults are the thresholds used where none is set.
func Defaults() Thresholds {
	return Thresholds{
		CPUEfficiencyBelow:  0.5,
		MemoryUsedBelow:     0.25,
		MemoryUsedAbove:     0.9,
		GPUIdleBelow:        0.01,
		GPUMemoryUsedBelow:  0.2,
		GPUUtilizationBelow: 0.3,
		CPUSaturatedAbove:   0.9,
		StragglerAbove:      1.5,
	}
}

// WithDefaults fills the zero fields from Defaults.
func (t Thresholds) WithDefaults() Thresholds {
	d := Defaults()
	for _, p := range []struct{ v, def *float64 }{
		{&t.CPUEfficiencyBelow, &d.CPUEfficiencyBelow}, {&t.MemoryUsedBelow, &d.MemoryUsedBelow},
		{&t.MemoryUsedAbove, &d.MemoryUsedAbove}, {&t.GPUIdleBelow, &d.GPUIdleBelow},
		{&t.GPUMemoryUsedBelow, &d.GPUMemoryUsedBelow}, {&t.GPUUtilizationBelow, &d.GPUUtilizationBelow},
		{&t.CPUSaturatedAbove, &d.CPUSaturatedAbove}, {&t.StragglerAbove, &d.StragglerAbove},
	} {
		if *p.v == 0 {
			*p.v = *p.def
		}
	}
	return t
}

// Validate says what is wrong with thresholds (after WithDefaults): each
// is a share from 0 (exclusive) to 1 but StragglerAbove, a ratio above 1
// and at most MaxStragglerAbove, and a job cannot be both over- and
// under-requested.
func (t Thresholds) Validate() error {
	var errs []error
	for name, v := range map[string]float64{
		"cpuEfficiencyBelow": t.CPUEfficiencyBelow, "memoryUsedBelow": t.MemoryUsedBelow, "memoryUsedAbove": t.MemoryUsedAbove,
		"gpuIdleBelow": t.GPUIdleBelow, "gpuMemoryUsedBelow": t.GPUMemoryUsedBelow,
		"gpuUtilizationBelow": t.GPUUtilizationBelow, "cpuSaturatedAbove": t.CPUSaturatedAbove,
	} {
		if !(v > 0 && v <= 1) {
			errs = append(errs, fmt.Errorf("%s %v: want a share above 0 and at most 1", name, v))
		}
	}
	if !(t.StragglerAbove > 1 && t.StragglerAbove <= MaxStragglerAbove) {
		errs = append(errs, fmt.Errorf("stragglerAbove %v: want a ratio above 1 and at most %v", t.StragglerAbove, MaxStragglerAbove))
	}
	if t.MemoryUsedBelow >= t.MemoryUsedAbove {
		errs = append(errs, fmt.Errorf("memoryUsedBelow %v must be under memoryUsedAbove %v", t.MemoryUsedBelow, t.MemoryUsedAbove))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errors.Join(errs...)
}

// Job is what one job used over the range, per node and per GPU.
type Job struct {
	ID, User, Name string
	Nodes          []Node
	// GPUs are those allocated to the job.
	GPUs []GPU
	// Blocked is the time its threads spent blocked off the CPU in the
	// range (its off-CPU profile's blocked time), and Waits where, the
	// most first; 0 and nil where it has no off-CPU profile.
	Blocked int64
	Waits   []Wait
}

// Node is the job's part on one node, from its cgroup there.
type Node struct {
	Host string
	// Seconds is how long the job was seen on the node in the range, the
	// span its UsedCores is measured over; 0 when unknown.
	Seconds float64
	// CPUSeconds is the CPU time it used in the range (from its start,
	// when it started in the range).
	CPUSeconds float64
	// UsedCores is the mean number of cores busy over Seconds; valid
	// where HasCPU.
	UsedCores float64
	HasCPU    bool
	// Cores is the number of CPUs allocated (its cpuset); 0 when unknown.
	Cores float64
	// MemPeak is the highest memory charged; MemLimit the job's limit
	// there (its request). 0 when unknown or unlimited.
	MemPeak, MemLimit float64
	OOMKills          float64
}

// GPU is one GPU or MIG instance allocated to the job.
type GPU struct {
	Host, UUID, Index, MIGInstance string
	// UtilMean and UtilMax are the job's utilisation of it over the
	// range; HasUtil is false where NVML gives none (MIG instances).
	UtilMean, UtilMax float64
	HasUtil           bool
	// MemMax is the most device memory the job's processes held on it,
	// MemTotal the device's (or MIG instance's); 0 when unknown.
	MemMax, MemTotal float64
	// Hours is how long the job held it in the range.
	Hours float64
}

// Number is one figure behind a finding.
type Number struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Unit is a Grafana unit id: percentunit, bytes, short, h.
	Unit string `json:"unit"`
}

// Finding is one observation about one job.
type Finding struct {
	Kind     Kind     `json:"kind"`
	Severity Severity `json:"severity"`
	JobID    string   `json:"job_id"`
	User     string   `json:"user,omitempty"`
	Name     string   `json:"name,omitempty"`
	// Summary says what was seen, with its numbers ("used 1.9 of 16
	// cores (12%)"); Advice what to do about it, in one line.
	Summary string `json:"summary"`
	Advice  string `json:"advice"`
	// Value is the finding's headline figure, which alert rules compare:
	// the share judged against Threshold (cores used of those allocated,
	// peak memory of the limit, ...), or for gpuIdle the number of idle
	// GPUs and for oomKilled the number of kills (Threshold 0).
	Value     float64  `json:"value"`
	Threshold float64  `json:"threshold"`
	Numbers   []Number `json:"numbers"`
	// Rank and Function are where a straggler finding is: the rank and
	// the function (or the call it blocked in) where it differs most.
	Rank     string `json:"rank,omitempty"`
	Function string `json:"function,omitempty"`
}

// Evaluate returns the job's findings under t (zero fields: defaults),
// the most severe first.
func Evaluate(j Job, t Thresholds) []Finding {
	t = t.WithDefaults()
	var out []Finding
	add := func(f Finding) {
		f.JobID, f.User, f.Name = j.ID, j.User, j.Name
		out = append(out, f)
	}
	gpus := evalGPUs(j, t, add)
	eff, haveEff := cpuEfficiency(j)
	if haveEff {
		evalCPU(j, t, eff, add)
		if gpus.busy > 0 && eff >= t.CPUSaturatedAbove && gpus.busyMean < t.GPUUtilizationBelow {
			add(Finding{Kind: InputBound, Severity: Warning, Value: gpus.busyMean, Threshold: t.GPUUtilizationBelow,
				Summary: fmt.Sprintf("its GPUs were %s busy on average while its CPUs were %s busy", pct(gpus.busyMean), pct(eff)),
				Advice:  "The GPUs wait for their input: ask for more cores (-c), use more data-loader workers, prefetch and pin memory.",
				Numbers: []Number{{"gpu_utilization_mean", gpus.busyMean, "percentunit"}, {"cpu_efficiency", eff, "percentunit"},
					{"busy_gpus", float64(gpus.busy), "short"}}})
		}
	}
	evalMemory(j, t, add)
	Sort(out)
	return out
}

// Sort orders findings the most severe first, then by job id and kind.
func Sort(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		if d := a.Severity.rank() - b.Severity.rank(); d != 0 {
			return d
		}
		if c := strings.Compare(a.JobID, b.JobID); c != 0 {
			return c
		}
		return slices.Index(Kinds, a.Kind) - slices.Index(Kinds, b.Kind)
	})
}

type gpuSummary struct {
	busy     int     // GPUs with utilisation that are not idle
	busyMean float64 // their mean utilisation
}

// idle says whether the job left g idle: its utilisation never reached
// the threshold, or, where NVML gives no utilisation (MIG instances), its
// processes never held memory on it.
func idle(g GPU, t Thresholds) bool {
	if g.HasUtil {
		return g.UtilMax < t.GPUIdleBelow
	}
	return g.MemMax == 0
}

func evalGPUs(j Job, t Thresholds, add func(Finding)) gpuSummary {
	var s gpuSummary
	var idleNames []string
	var idleHours, busySum, memRatio float64
	var memMax, memTotal float64
	for _, g := range j.GPUs {
		if idle(g, t) {
			idleNames = append(idleNames, gpuName(g))
			idleHours += g.Hours
			continue
		}
		if g.HasUtil {
			s.busy++
			busySum += g.UtilMean
		}
		if g.MemTotal > 0 {
			if r := g.MemMax / g.MemTotal; r > memRatio || memTotal == 0 {
				memRatio, memMax, memTotal = r, g.MemMax, g.MemTotal
			}
		}
	}
	if s.busy > 0 {
		s.busyMean = busySum / float64(s.busy)
	}
	if n := len(idleNames); n > 0 {
		sev := Warning
		if n == len(j.GPUs) {
			sev = Critical
		}
		add(Finding{Kind: GPUIdle, Severity: sev, Value: float64(n), Threshold: t.GPUIdleBelow,
			Summary: fmt.Sprintf("%d of %d allocated GPUs idle (%s), %.1f GPU-hours", n, len(j.GPUs), strings.Join(idleNames, ", "), idleHours),
			Advice:  "Ask for only the GPUs the job uses (--gres=gpu:N), or make it use them all (check CUDA_VISIBLE_DEVICES and the launcher's ranks).",
			Numbers: []Number{{"idle_gpus", float64(n), "short"}, {"allocated_gpus", float64(len(j.GPUs)), "short"},
				{"idle_gpu_hours", idleHours, "h"}}})
	}
	if memTotal > 0 && memRatio < t.GPUMemoryUsedBelow {
		add(Finding{Kind: GPUMemoryUnderused, Severity: Info, Value: memRatio, Threshold: t.GPUMemoryUsedBelow,
			Summary: fmt.Sprintf("GPU memory peak %s of %s (%s) on its fullest GPU", iec(memMax), iec(memTotal), pct(memRatio)),
			Advice:  "A smaller GPU or a MIG instance would hold this; or raise the batch size to use the memory.",
			Numbers: []Number{{"gpu_memory_peak_bytes", memMax, "bytes"}, {"gpu_memory_total_bytes", memTotal, "bytes"},
				{"gpu_memory_used", memRatio, "percentunit"}}})
	}
	return s
}

func gpuName(g GPU) string {
	n := "GPU " + g.Index
	if g.MIGInstance != "" {
		n += " MIG " + g.MIGInstance
	}
	if g.Host != "" {
		n += " on " + g.Host
	}
	return n
}

// cpuEfficiency is cores used over cores allocated, over the nodes where
// both are known.
func cpuEfficiency(j Job) (float64, bool) {
	used, alloc := 0.0, 0.0
	for _, n := range j.Nodes {
		if n.HasCPU && n.Cores > 0 && n.Seconds > 0 {
			used += n.UsedCores
			alloc += n.Cores
		}
	}
	if alloc == 0 {
		return 0, false
	}
	return used / alloc, true
}

// NamesWaits says whether j's findings name its waits: it left cores
// idle, and where its threads blocked instead says why. The engine looks
// the waits up (a profile query per job) only for such jobs.
func NamesWaits(j Job, t Thresholds) bool {
	eff, ok := cpuEfficiency(j)
	return ok && eff < t.WithDefaults().CPUEfficiencyBelow
}

func evalCPU(j Job, t Thresholds, eff float64, add func(Finding)) {
	if eff >= t.CPUEfficiencyBelow {
		return
	}
	used, alloc, wasted, nodes := 0.0, 0.0, 0.0, 0
	for _, n := range j.Nodes {
		if n.HasCPU && n.Cores > 0 && n.Seconds > 0 {
			used += n.UsedCores
			alloc += n.Cores
			wasted += math.Max(n.Cores-n.UsedCores, 0) * n.Seconds / 3600
			nodes++
		}
	}
	on := ""
	if nodes > 1 {
		on = fmt.Sprintf(" on %d nodes", nodes)
	}
	f := Finding{Kind: CPUUnderused, Severity: Warning, Value: eff, Threshold: t.CPUEfficiencyBelow,
		Summary: fmt.Sprintf("used %s of %s cores (%s)%s", cores(used), cores(alloc), pct(eff), on),
		Advice:  "Ask for fewer cores (--cpus-per-task, --ntasks), or make the program use them (threads, processes, OMP_NUM_THREADS).",
		Numbers: []Number{{"used_cores", used, "short"}, {"allocated_cores", alloc, "short"}, {"cpu_efficiency", eff, "percentunit"},
			{"wasted_core_hours", wasted, "h"}}}
	if where, top := waitsSummary(j); where != "" {
		f.Summary += "; " + where
		f.Advice = "Ask for fewer cores (--cpus-per-task, --ntasks), or make the program use them, starting where its threads block: " +
			"overlap that wait with work (prefetching, more data-loader workers, asynchronous I/O) or shorten it."
		f.Numbers = append(f.Numbers, Number{"blocked_time", float64(j.Blocked), "ns"}, Number{"top_wait_share", top, "percentunit"})
	}
	add(f)
}

// A finding names at most namedWaits waits: the largest, and the next
// ones that hold at least minWaitShare of the blocked time each.
const (
	namedWaits   = 3
	minWaitShare = 0.1
)

// waitsSummary says where j's threads blocked ("73% of its threads'
// blocked time is in `read` under `load_batch`, 20% in ..."), and the
// largest wait's share; "" without off-CPU data.
func waitsSummary(j Job) (string, float64) {
	if j.Blocked <= 0 || len(j.Waits) == 0 {
		return "", 0
	}
	var parts []string
	for i, w := range j.Waits {
		share := float64(w.Blocked) / float64(j.Blocked)
		if i == namedWaits || i > 0 && share < minWaitShare {
			break
		}
		in := " in "
		if i == 0 {
			in = " of its threads' blocked time is in "
		}
		at := pct(share) + in + "`" + w.Function + "`"
		if w.Caller != "" {
			at += " under `" + w.Caller + "`"
		}
		parts = append(parts, at)
	}
	return strings.Join(parts, ", "), float64(j.Waits[0].Blocked) / float64(j.Blocked)
}

func evalMemory(j Job, t Thresholds, add func(Finding)) {
	kills := 0.0
	var peak, limit, ratio float64
	for _, n := range j.Nodes {
		kills += n.OOMKills
		if n.MemLimit > 0 && n.MemPeak > 0 {
			if r := n.MemPeak / n.MemLimit; r > ratio || limit == 0 {
				ratio, peak, limit = r, n.MemPeak, n.MemLimit
			}
		}
	}
	nums := func() []Number {
		if limit == 0 {
			return nil
		}
		return []Number{{"memory_peak_bytes", peak, "bytes"}, {"memory_limit_bytes", limit, "bytes"}, {"memory_used", ratio, "percentunit"}}
	}
	if kills > 0 {
		what := "no memory limit seen"
		if limit > 0 {
			what = fmt.Sprintf("peak %s of a %s limit", iec(peak), iec(limit))
		}
		add(Finding{Kind: OOMKilled, Severity: Critical, Value: kills, Threshold: 0,
			Summary: fmt.Sprintf("%s OOM-killed (%s)", plural(kills, "process", "processes"), what),
			Advice:  "The job ran out of the memory it asked for: request more (--mem, --mem-per-cpu) or make it hold less.",
			Numbers: append([]Number{{"oom_kills", kills, "short"}}, nums()...)})
	}
	if limit == 0 {
		return
	}
	switch {
	case ratio >= t.MemoryUsedAbove && kills == 0:
		add(Finding{Kind: MemoryNearLimit, Severity: Warning, Value: ratio, Threshold: t.MemoryUsedAbove,
			Summary: fmt.Sprintf("peak memory %s of %s requested (%s)", iec(peak), iec(limit), pct(ratio)),
			Advice:  "The job nearly hit its memory limit: request more (--mem) before it is OOM-killed.",
			Numbers: nums()})
	case ratio < t.MemoryUsedBelow:
		add(Finding{Kind: MemoryOverRequested, Severity: Info, Value: ratio, Threshold: t.MemoryUsedBelow,
			Summary: fmt.Sprintf("peak memory %s of %s requested (%s)", iec(peak), iec(limit), pct(ratio)),
			Advice:  fmt.Sprintf("Request less memory (--mem): the peak and a fifth more, about %s, would do.", iec(peak*1.2)),
			Numbers: nums()})
	}
}

// Waste is what the job held and left unused in the range: allocated
// core-hours not used, and GPU-hours not used (a GPU's hours times the
// share it was idle; a MIG instance's whole hours when it was idle).
func Waste(j Job, t Thresholds) (coreHours, gpuHours float64) {
	t = t.WithDefaults()
	for _, n := range j.Nodes {
		if n.HasCPU && n.Cores > 0 {
			coreHours += math.Max(n.Cores-n.UsedCores, 0) * n.Seconds / 3600
		}
	}
	for _, g := range j.GPUs {
		switch {
		case g.HasUtil:
			gpuHours += g.Hours * (1 - math.Min(math.Max(g.UtilMean, 0), 1))
		case idle(g, t):
			gpuHours += g.Hours
		}
	}
	return coreHours, gpuHours
}

func pct(r float64) string { return fmt.Sprintf("%.0f%%", 100*r) }

// cores prints a core count briefly: whole counts bare ("16"), others
// with one decimal ("1.9"), or two below one core ("0.25").
func cores(v float64) string {
	switch {
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v < 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func plural(n float64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%.0f %s", n, many)
}

// iec prints bytes in binary units.
func iec(b float64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%.0f B", b)
	}
	div, exp := float64(unit), 0
	for n := b / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", b/div, "KMGTPE"[exp])
}

// Flags registers the thresholds as command-line flags on fs (their
// defaults shown), each named as its JSON setting in kebab case.
func (t *Thresholds) Flags(fs *flag.FlagSet) {
	d := Defaults()
	*t = d
	fs.Float64Var(&t.CPUEfficiencyBelow, "cpu-efficiency-below", d.CPUEfficiencyBelow, "finding: cores used over cores allocated below this")
	fs.Float64Var(&t.MemoryUsedBelow, "memory-used-below", d.MemoryUsedBelow, "finding: peak memory over the requested below this (over-requested)")
	fs.Float64Var(&t.MemoryUsedAbove, "memory-used-above", d.MemoryUsedAbove, "finding: peak memory over the requested at or above this (near the limit)")
	fs.Float64Var(&t.GPUIdleBelow, "gpu-idle-below", d.GPUIdleBelow, "finding: an allocated GPU whose highest utilisation stayed below this is idle")
	fs.Float64Var(&t.GPUMemoryUsedBelow, "gpu-memory-used-below", d.GPUMemoryUsedBelow, "finding: peak GPU memory over the device's below this")
	fs.Float64Var(&t.GPUUtilizationBelow, "gpu-utilization-below", d.GPUUtilizationBelow, "finding (input bound): mean GPU utilisation below this ...")
	fs.Float64Var(&t.CPUSaturatedAbove, "cpu-saturated-above", d.CPUSaturatedAbove, "... while cores used over allocated are at or above this")
	fs.Float64Var(&t.StragglerAbove, "straggler-above", d.StragglerAbove, "finding: a rank's time in one of its job's top functions over the median rank's above this ratio")
}
