package query

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/filter"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/findings"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/flame"
	"github.com/slurmscope/slurmscope/schema"
)

// Per-rank time of multi-rank jobs, whose profiles carry slurm.task.rank:
// the table `slurmscope job --ranks` prints, and the straggler findings
// (findings.Stragglers) it and the findings table give. Judging a rank
// takes its own flame graph, a call per rank, selector and time chunk,
// of the CPU profile and of the blocked off-CPU one where the job has it.

// StragglerJobs bounds the jobs one findings table judges the ranks of,
// those with the most CPU time first; the others' findings go without.
const StragglerJobs = 10

// RankReport is what `slurmscope job --ranks` prints.
type RankReport struct {
	JobID string `json:"job_id"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Findings are the job's stragglers, the furthest over the median
	// first.
	Findings []findings.Finding `json:"findings"`
	CPUTotal int64              `json:"cpu_total_ns"`
	// MedianCPU is the median rank's CPU time, which Deviation is from.
	MedianCPU float64 `json:"median_rank_cpu_ns"`
	// Unranked is the CPU time of the job's processes that carry no rank
	// (a batch script, a launcher's own process).
	Unranked int64       `json:"unranked_cpu_ns"`
	Ranks    []RankStats `json:"ranks"`
	// OffCPUProfile is the blocked off-CPU profile type where the job has
	// such profiles in the range; each rank's Blocked is from it.
	OffCPUProfile string   `json:"off_cpu_profile_type,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
}

// RankStats is one rank of a job over the range.
type RankStats struct {
	Rank string `json:"rank"`
	CPU  int64  `json:"cpu_ns"`
	// TopFunction is where the rank spent the most CPU time (self),
	// TopShare that time over the rank's CPU time.
	TopFunction string  `json:"top_function"`
	TopShare    float64 `json:"top_function_share"`
	// Deviation is the rank's CPU time over the median rank's, less one:
	// 1 is twice the median, -0.5 half of it.
	Deviation float64 `json:"deviation_from_median"`
	Blocked   int64   `json:"blocked_ns,omitempty"`
}

// Ranks gathers the per-rank report of job jobID over r, with its
// straggler findings. A job whose profiles carry no rank has no ranks.
func (e *Engine) Ranks(ctx context.Context, jobID string, r Range) (*RankReport, error) {
	if e.Profiles == nil {
		return nil, ErrNoPyroscope
	}
	rep := &RankReport{JobID: jobID, From: r.From.UTC().Format("2006-01-02T15:04:05Z"), To: r.To.UTC().Format("2006-01-02T15:04:05Z"),
		Findings: []findings.Finding{}, Ranks: []RankStats{}}
	scope := Scope{Filter: filter.Equal(schema.JobID, jobID)}
	jobs, err := e.rankedJobs(ctx, scope, r)
	if err != nil {
		return nil, err
	}
	j := jobs[jobID]
	if j == nil {
		return rep, nil
	}
	rep.Unranked = int64(j.unranked)
	if len(j.cpu) == 0 {
		return rep, nil
	}
	off, err := e.OffCPUProfileType(ctx, r)
	if err != nil {
		return nil, err
	}
	plans, err := e.planJob(scope, j, off, r)
	if err != nil {
		return nil, err
	}
	n := plans[0].size()
	if len(plans) > 1 {
		n += plans[1].size()
	}
	if err := e.allow(n, fmt.Sprintf("%d rank(s) × selector(s) × time chunk(s) × %d profile type(s)", len(j.cpu), len(plans))); err != nil {
		return nil, err
	}
	trees, err := e.readRanks(ctx, plans)
	if err != nil {
		return nil, err
	}
	rep.Ranks, rep.CPUTotal, rep.MedianCPU = rankStats(plans[0].ranks, trees[0])
	if len(trees) > 1 {
		rep.OffCPUProfile = off
		for i, t := range trees[1] {
			rep.Ranks[i].Blocked = t.Total()
		}
	}
	rep.Findings = append(rep.Findings, findings.Stragglers(rankedTimes(j, plans, trees), e.Thresholds)...)
	if len(rep.Ranks) < findings.MinRanks {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d rank(s): stragglers are judged among %d ranks or more", len(rep.Ranks), findings.MinRanks))
	}
	return rep, nil
}

// rankStats is each rank's line of the report, the CPU time of all of
// them and the median rank's.
func rankStats(ranks []string, trees []*flame.Tree) ([]RankStats, int64, float64) {
	out := make([]RankStats, len(ranks))
	cpu := make([]float64, len(ranks))
	var total int64
	for i, t := range trees {
		out[i] = RankStats{Rank: ranks[i], CPU: t.Total()}
		cpu[i] = float64(t.Total())
		total += t.Total()
		for _, f := range t.TopFunctions(2) {
			if f.Name != flame.OtherName && t.Total() > 0 {
				out[i].TopFunction, out[i].TopShare = f.Name, float64(f.Self)/float64(t.Total())
				break
			}
		}
	}
	med := findings.Median(cpu)
	if med > 0 {
		for i := range out {
			out[i].Deviation = cpu[i]/med - 1
		}
	}
	return out, total, med
}

// rankedJob is a job seen in profiles with its ranks' CPU time.
type rankedJob struct {
	id, user, name string
	cpu            map[string]float64 // by rank
	unranked       float64
}

func (j *rankedJob) ranks() []string {
	return slices.SortedFunc(maps.Keys(j.cpu), findings.CompareRanks)
}

// rankedJobs lists the jobs under scope with CPU profiles in r, with each
// rank's CPU time: one total per selector and time chunk, grouped by job
// and rank.
func (e *Engine) rankedJobs(ctx context.Context, scope Scope, r Range) (map[string]*rankedJob, error) {
	ss, err := e.totals(ctx, scope, CPUProfileType, []schema.Attribute{schema.JobID, schema.JobUser, schema.JobName, schema.TaskRank}, r)
	if err != nil {
		return nil, err
	}
	out := map[string]*rankedJob{}
	for _, s := range ss {
		id := s.Labels[schema.JobID.Name]
		if id == "" {
			continue
		}
		j := out[id]
		if j == nil {
			j = &rankedJob{id: id, cpu: map[string]float64{}}
			out[id] = j
		}
		// A node that had no metadata yet gives the job no name: take any.
		j.user = cmp.Or(j.user, s.Labels[schema.JobUser.Name])
		j.name = cmp.Or(j.name, s.Labels[schema.JobName.Name])
		var v float64
		for _, x := range s.Values {
			v += x
		}
		if rank := s.Labels[schema.TaskRank.Name]; rank != "" {
			j.cpu[rank] += v
		} else {
			j.unranked += v
		}
	}
	return out, nil
}

// rankPlan reads one tree per rank of a job, of one profile type.
type rankPlan struct {
	what   string // as findings name it: "CPU time", "blocked time"
	places func(t *flame.Tree, n int) ([]findings.Place, map[findings.Place]int64)
	ranks  []string
	calls  [][]mergeCall // per rank
}

func (p rankPlan) size() (n int) {
	for _, c := range p.calls {
		n += len(c)
	}
	return n
}

// planJob plans the trees that judge j's ranks: CPU, and blocked off-CPU
// time where offCPU names its profile type.
func (e *Engine) planJob(scope Scope, j *rankedJob, offCPU string, r Range) ([]rankPlan, error) {
	plan := func(what, pt string, places func(*flame.Tree, int) ([]findings.Place, map[findings.Place]int64)) (rankPlan, error) {
		p := rankPlan{what: what, places: places, ranks: j.ranks()}
		chunks := spans(r.From, r.To, e.maxQueryLength())
		for _, rank := range p.ranks {
			sels, err := scope.narrowed(filter.And(filter.Equal(schema.JobID, j.id), filter.Equal(schema.TaskRank, rank))).Selectors(filter.Pyroscope)
			if err != nil {
				return p, err
			}
			p.calls = append(p.calls, mergeCalls(pt, sels, chunks))
		}
		return p, nil
	}
	cpu, err := plan(findings.CPUTime, CPUProfileType, cpuPlaces)
	if err != nil || offCPU == "" {
		return []rankPlan{cpu}, err
	}
	blocked, err := plan(findings.BlockedTime, offCPU, blockedPlaces)
	return []rankPlan{cpu, blocked}, err
}

// readRanks makes the plans' calls, together and at most Parallel at a
// time, and sums each rank's answers into its tree: per plan, per rank.
func (e *Engine) readRanks(ctx context.Context, plans []rankPlan) ([][]*flame.Tree, error) {
	var calls []mergeCall
	for _, p := range plans {
		for _, c := range p.calls {
			calls = append(calls, c...)
		}
	}
	graphs, err := e.merge(ctx, calls, 0)
	if err != nil {
		return nil, err
	}
	out := make([][]*flame.Tree, len(plans))
	k := 0
	for i, p := range plans {
		for _, c := range p.calls {
			t, err := sumGraphs(graphs[k:k+len(c)], 0)
			if err != nil {
				return nil, err
			}
			k += len(c)
			out[i] = append(out[i], t)
		}
	}
	return out, nil
}

// rankedTimes is what findings.Stragglers judges: per plan, each rank's
// time in the job's top places, the functions with the most CPU time or
// the calls its threads blocked in the longest.
func rankedTimes(j *rankedJob, plans []rankPlan, trees [][]*flame.Tree) findings.RankedJob {
	out := findings.RankedJob{ID: j.id, User: j.user, Name: j.name}
	for i, p := range plans {
		job := flame.New()
		for _, t := range trees[i] {
			job.Merge(t)
		}
		top, _ := p.places(job, TopCPUFunctions)
		rt := findings.RankTimes{What: p.what, Places: top}
		for k, t := range trees[i] {
			_, in := p.places(t, 0)
			times := make([]int64, len(top))
			for x, pl := range top {
				times[x] = in[pl]
			}
			rt.Ranks = append(rt.Ranks, findings.RankTime{Rank: p.ranks[k], Total: t.Total(), In: times})
		}
		out.Times = append(out.Times, rt)
	}
	return out
}

// cpuPlaces are t's functions by self time, the most first, at most n
// (<= 0: all), and the time of each; "other" names no one place.
func cpuPlaces(t *flame.Tree, n int) ([]findings.Place, map[findings.Place]int64) {
	var top []findings.Place
	in := map[findings.Place]int64{}
	for _, f := range t.TopFunctions(0) {
		if f.Name == flame.OtherName || f.Self == 0 {
			continue
		}
		p := findings.Place{Function: f.Name}
		in[p] = f.Self
		if n <= 0 || len(top) < n {
			top = append(top, p)
		}
	}
	return top, in
}

// blockedPlaces are t's waits (findings.WaitAt), the longest first, at
// most n (<= 0: all), and the time of each.
func blockedPlaces(t *flame.Tree, n int) ([]findings.Place, map[findings.Place]int64) {
	var top []findings.Place
	in := map[findings.Place]int64{}
	for _, w := range topWaits(t, 0) {
		p := findings.Place{Function: w.Function, Caller: w.Caller}
		in[p] = w.Blocked
		if n <= 0 || len(top) < n {
			top = append(top, p)
		}
	}
	return top, in
}

// stragglers judges the ranks of the multi-rank jobs under scope, at most
// StragglerJobs of them, those with the most CPU time first, within room
// calls: first the ranks' totals and the profile types, then each job's
// trees, the blocked ones left out where the CPU ones alone fit. They
// are extra: where room runs out, the other jobs go without.
func (e *Engine) stragglers(ctx context.Context, scope Scope, r Range, room int) ([]findings.Finding, error) {
	sels, err := scope.Selectors(filter.Pyroscope)
	if err != nil || len(sels) == 0 {
		return nil, err
	}
	chunks := len(spans(r.From, r.To, e.maxQueryLength()))
	room -= len(sels)*len(totalsPlan(r.From, r.To, e.maxQueryLength())) + chunks
	if room <= 0 {
		return nil, nil
	}
	jobs, err := e.rankedJobs(ctx, scope, r)
	if err != nil {
		return nil, err
	}
	want := stragglerJobs(jobs)
	if len(want) == 0 {
		return nil, nil
	}
	off, err := e.OffCPUProfileType(ctx, r)
	if err != nil {
		return nil, err
	}
	var plans []rankPlan
	var owners []*rankedJob // of each plan
	for _, j := range want {
		ps, err := e.planJob(scope, j, off, r)
		if err != nil {
			return nil, err
		}
		if len(ps) > 1 && ps[0].size()+ps[1].size() > room {
			ps = ps[:1]
		}
		if ps[0].size() > room {
			continue
		}
		for _, p := range ps {
			room -= p.size()
			plans = append(plans, p)
			owners = append(owners, j)
		}
	}
	trees, err := e.readRanks(ctx, plans)
	if err != nil {
		return nil, err
	}
	var out []findings.Finding
	for i := 0; i < len(plans); {
		k := i + 1
		for k < len(plans) && owners[k] == owners[i] {
			k++
		}
		out = append(out, findings.Stragglers(rankedTimes(owners[i], plans[i:k], trees[i:k]), e.Thresholds)...)
		i = k
	}
	return out, nil
}

// stragglerJobs are the jobs with enough ranks to judge, the most CPU
// time first, at most StragglerJobs.
func stragglerJobs(jobs map[string]*rankedJob) []*rankedJob {
	var out []*rankedJob
	cpu := map[*rankedJob]float64{}
	for _, j := range jobs {
		if len(j.cpu) >= findings.MinRanks {
			out = append(out, j)
			for _, v := range j.cpu {
				cpu[j] += v
			}
		}
	}
	slices.SortFunc(out, func(a, b *rankedJob) int { return cmp.Or(cmp.Compare(cpu[b], cpu[a]), cmp.Compare(a.id, b.id)) })
	return out[:min(len(out), StragglerJobs)]
}
