package sink

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/schema"
)

// MaxFileBytes bounds what ReadDir reads of one file: a profile is a few
// hundred kilobytes, and a stray multi-gigabyte file must not exhaust memory.
const MaxFileBytes = 256 << 20

// Job is one job directory's profiles of one type merged: the labels
// found in the files' comments and the main value (CPU time, for CPU
// profiles) per function.
type Job struct {
	Dir     string // the directory's name: the job id, or NoJobDir
	Files   int    // profiles read
	CPU     int64  // nanoseconds of the main value
	Samples int64  // the type's count (samples, switches, launches)

	labels map[string]map[string]bool // wire label -> values seen
	self   map[string]int64           // function -> nanoseconds with it as the leaf
	cum    map[string]int64           // function -> nanoseconds with it anywhere on the stack
}

// Values returns the values the job's files carry for a wire label, sorted
// (a job on several hosts has several host names).
func (j *Job) Values(label string) []string {
	var vs []string
	for v := range j.labels[label] {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	return vs
}

// Value is Values joined with commas.
func (j *Job) Value(label string) string { return strings.Join(j.Values(label), ",") }

// ReadDir reads the CPU profiles Dir wrote under dir: ReadDirOf with
// schema.ProcessCPU.
func ReadDir(dir, only string, skip func(string, error)) ([]*Job, error) {
	return ReadDirOf(dir, only, schema.ProcessCPU, skip)
}

// ReadDirOf reads the profiles of one type that Dir wrote under dir,
// DIR/<job>/<type>-*.pb.gz (only DIR/only/ when only is set), busiest job
// first, summing typ's main value (Job.CPU) and its count. A file that
// cannot be read or parsed, or lacks the value, goes to skip and is left
// out: one bad file must not hide every other job.
func ReadDirOf(dir, only string, typ schema.ProfileType, skip func(string, error)) ([]*Job, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var jobs []*Job
	found := false
	for _, e := range entries {
		if !e.IsDir() || (only != "" && e.Name() != only) {
			continue
		}
		found = true
		j := &Job{Dir: e.Name(), labels: map[string]map[string]bool{}, self: map[string]int64{}, cum: map[string]int64{}}
		files, err := filepath.Glob(filepath.Join(dir, e.Name(), typ.Name+"-*.pb.gz"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		for _, f := range files {
			if err := j.add(f, typ); err != nil {
				skip(f, err)
				continue
			}
			j.Files++
		}
		if j.Files > 0 {
			jobs = append(jobs, j)
		}
	}
	if only != "" && !found {
		return nil, fmt.Errorf("no directory for job %s under %s", only, dir)
	}
	// Busiest job first; ties (and empty profiles) by job id, numerically
	// where both are numbers, so the order is stable.
	sort.Slice(jobs, func(a, b int) bool {
		if jobs[a].CPU != jobs[b].CPU {
			return jobs[a].CPU > jobs[b].CPU
		}
		return lessJobID(jobs[a].Dir, jobs[b].Dir)
	})
	return jobs, nil
}

func lessJobID(a, b string) bool {
	na, ea := strconv.ParseUint(a, 10, 64)
	nb, eb := strconv.ParseUint(b, 10, 64)
	if ea == nil && eb == nil {
		return na < nb
	}
	if (ea == nil) != (eb == nil) {
		return ea == nil // numbered jobs before _nojob and the like
	}
	return a < b
}

// add folds one file into the job. It reads the whole file before changing
// anything, so a file that fails half way leaves no trace.
func (j *Job) add(path string, typ schema.ProfileType) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return err
	}
	if len(data) > MaxFileBytes {
		return fmt.Errorf("larger than %d MiB", MaxFileBytes>>20)
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return err
	}
	main, counted := typ.Main(), typ.SampleTypes[0]
	cpuIdx, countIdx := -1, -1
	for i, st := range p.SampleType {
		switch {
		case st.Type == main.Type && st.Unit == main.Unit:
			cpuIdx = i
		case st.Type == counted.Type && st.Unit == counted.Unit:
			countIdx = i
		}
	}
	// A profile with only sample counts still says how much they stand
	// for when its period is of the main type (CPU time).
	perSample := int64(0)
	if cpuIdx < 0 {
		if countIdx < 0 || p.PeriodType == nil || p.PeriodType.Type != main.Type || p.PeriodType.Unit != main.Unit || p.Period <= 0 {
			return fmt.Errorf("no %s/%s sample type: not a %s profile", main.Type, main.Unit, typ.Name)
		}
		perSample = p.Period
	}
	var cpu, count int64
	self := map[string]int64{}
	cum := map[string]int64{}
	seen := map[string]bool{}
	for _, s := range p.Sample {
		var ns, n int64
		if countIdx >= 0 {
			n = s.Value[countIdx]
		}
		if cpuIdx >= 0 {
			ns = s.Value[cpuIdx]
		} else {
			ns = n * perSample
		}
		if ns < 0 || n < 0 || ns > math.MaxInt64-cpu || n > math.MaxInt64-count {
			return errors.New("negative or overflowing sample values")
		}
		cpu += ns
		count += n
		if len(s.Location) == 0 {
			self["[no stack]"] += ns
			cum["[no stack]"] += ns
			continue
		}
		self[leafName(leaf(s.Location, typ))] += ns
		clear(seen)
		for _, loc := range s.Location {
			for _, name := range frameNames(loc) {
				// Recursion must not count a sample twice.
				if !seen[name] {
					seen[name] = true
					cum[name] += ns
				}
			}
		}
	}
	if cpu > math.MaxInt64-j.CPU || count > math.MaxInt64-j.Samples {
		return errors.New("sample values overflow the job's total")
	}
	j.CPU += cpu
	j.Samples += count
	for k, v := range self {
		j.self[k] += v
	}
	for k, v := range cum {
		j.cum[k] += v
	}
	for _, c := range p.Comments {
		name, value, ok := strings.Cut(c, "=")
		if !ok || name == "" {
			continue // a comment that is not a label
		}
		if j.labels[name] == nil {
			j.labels[name] = map[string]bool{}
		}
		j.labels[name][value] = true
	}
	return nil
}

// leaf is a sample's self location: its innermost, or for off-CPU time,
// whose innermost frame is always the scheduler's, the innermost outside
// the kernel: the call the program blocked in.
func leaf(locs []*profile.Location, typ schema.ProfileType) *profile.Location {
	if typ.Name == schema.OffCPU.Name {
		for _, l := range locs {
			if l.Mapping == nil || l.Mapping.File != symbolize.KernelModule {
				return l
			}
		}
	}
	return locs[0]
}

// leafName is the innermost function of a location: pprof lists inlined
// frames innermost first.
func leafName(loc *profile.Location) string {
	if names := frameNames(loc); len(names) > 0 {
		return names[0]
	}
	return "[unknown]"
}

func frameNames(loc *profile.Location) []string {
	var names []string
	for _, l := range loc.Line {
		if l.Function != nil && l.Function.Name != "" {
			names = append(names, l.Function.Name)
		}
	}
	if len(names) == 0 {
		// Unsymbolised: keep the module visible, as pprof does.
		m := "?"
		if loc.Mapping != nil && loc.Mapping.File != "" {
			m = filepath.Base(loc.Mapping.File)
		}
		names = append(names, fmt.Sprintf("%s+%#x", m, loc.Address))
	}
	return names
}

// Func is one function's CPU time in a job, in nanoseconds.
type Func struct {
	Name      string
	Self, Cum int64 // as the leaf; anywhere on the stack
}

// Top returns the n functions with the most self time, most first.
func (j *Job) Top(n int) []Func {
	rows := make([]Func, 0, len(j.self))
	for name, v := range j.self {
		rows = append(rows, Func{name, v, j.cum[name]})
	}
	return topBy(rows, n, func(f Func) int64 { return f.Self })
}

// TopCum returns the n functions with the most time anywhere on the stack,
// most first: callers too (main, the functions above the hot ones), which
// have no self time.
func (j *Job) TopCum(n int) []Func {
	rows := make([]Func, 0, len(j.cum))
	for name, v := range j.cum {
		rows = append(rows, Func{name, j.self[name], v})
	}
	return topBy(rows, n, func(f Func) int64 { return f.Cum })
}

func topBy(rows []Func, n int, key func(Func) int64) []Func {
	sort.Slice(rows, func(a, b int) bool {
		if ka, kb := key(rows[a]), key(rows[b]); ka != kb {
			return ka > kb
		}
		return rows[a].Name < rows[b].Name
	})
	if len(rows) > n {
		rows = rows[:n]
	}
	return rows
}
