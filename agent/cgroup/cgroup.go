// Package cgroup recognises the cgroup paths Slurm puts job processes in and
// turns a /proc/<pid>/cgroup file into the job, step and task it names.
//
// Layouts recognised (see testdata for a fixture of each):
//
//	v2  /system.slice/slurmstepd.scope/job_<id>/step_<s>/user/task_<n>
//	v2  /system.slice/slurmstepd.scope/job_<id>/step_<s>/user/task_special
//	v2  /system.slice/slurmstepd.scope/job_<id>/step_<s>/slurm  (slurmstepd)
//	v2  /system.slice/<node>_slurmstepd.scope/...               (multiple slurmd)
//	v2  /system.slice/slurmstepd.scope/s<SLUID>/step_<s>/...    (Slurm 26.05, CgroupJobIdPaths=no)
//	v1  /slurm/uid_<uid>/job_<id>/step_<s>/task_<n>             (any v1 controller)
//	v1  /slurm_<node>/uid_<uid>/job_<id>/step_<s>/...           (multiple slurmd)
//
// Only Slurm's own hierarchy counts. slurmd makes it at a fixed place (the
// v2 scope in cgroup.conf's CgroupSlice, system.slice by default; the v1
// root at the top of each controller), which a Layout names; the same
// names anywhere else are a look-alike that any user with a writable
// cgroup subtree (a systemd user manager) can build, and are refused with
// a Refused error. Tree then checks that the directories Slurm made are
// really there and owned by root. The parser never trusts its input: a
// path that looks like Slurm's but is malformed is an error, and a process
// is never placed in a job on a guess.
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Location is where Slurm put a process.
type Location struct {
	InJob bool
	// JobID is the numeric job id from a job_<id> directory; empty when the
	// directory is a SLUID, whose job id must come from slurmstepd.
	JobID string
	SLUID string // the SLUID, without its "s" prefix
	Step  string // 0, 1, ..., batch, extern, interactive; empty if the process sits above any step
	Task  string // 0, 1, ..., special; empty for slurmstepd or above task level
	// Stepd is true for the step's "slurm" leaf: slurmstepd itself.
	Stepd bool
	// Node is set by the multiple-slurmd layouts, where one host runs
	// several slurmd and the path says which one owns the job.
	Node    string
	UID     int // from the v1 uid_<uid> directory; -1 when the path has none
	Version int // 1 or 2; 0 when not in a job
	// Hierarchy is the v1 line's controller list ("freezer",
	// "cpu,cpuacct", "name=systemd"): where Path lives. Empty for v2.
	Hierarchy string
	Path      string
	// Slurm is the leading part of Path that slurmd makes and keeps root's:
	// down to the job directory on v1 (Slurm gives the step's directories
	// to the job's user there), down to the step's user or slurm directory
	// on v2 (task directories belong to the job's user).
	Slurm string
}

// JobKey identifies a job on this host: the node matters under multiple
// slurmd, where one job id runs on several "nodes" of one host.
func (l Location) JobKey() string {
	id := l.JobID
	if id == "" {
		id = "s" + l.SLUID
	}
	return l.Node + "/" + id
}

// Limits that no real Slurm path comes near; anything longer is hostile.
const (
	maxJobIDDigits = 10 // job ids are uint32
	maxNameLen     = 128
)

var errConflict = errors.New("conflicting Slurm jobs on different cgroup hierarchies")

// Reasons a Slurm-looking path is refused, for counters.
const (
	// ReasonOutside is a Slurm-shaped path where slurmd does not make one.
	ReasonOutside = "outside_slurm_tree"
	// ReasonOwner is a directory of the Slurm part not owned by root.
	ReasonOwner = "not_root_owned"
	// ReasonUnverified is a path whose directories could not be checked
	// (gone with the process, or not a directory).
	ReasonUnverified = "unverified"
)

// Refused is a path that looks like a Slurm job's but is not Slurm's: the
// process is in no job.
type Refused struct {
	Reason string // one of the Reason constants
	Path   string
	Detail string
}

func (e *Refused) Error() string {
	return fmt.Sprintf("cgroup path %q is not Slurm's (%s): %s", truncate([]byte(e.Path)), e.Reason, e.Detail)
}

// Layout says where slurmd makes its cgroups.
type Layout struct {
	// V2Parents are the cgroups slurmd's scope may sit in: cgroup.conf's
	// CgroupSlice under the init cgroup, "/system.slice" by default.
	V2Parents []string
	// V1Parents are where the v1 Slurm root (slurm, slurm_<node>) may sit
	// in a controller: its top, "/", unless slurmd runs in a container.
	V1Parents []string
}

// DefaultLayout is where a Slurm of any version puts its cgroups unless
// cgroup.conf or a container moves them.
func DefaultLayout() Layout {
	return Layout{V2Parents: []string{"/system.slice"}, V1Parents: []string{"/"}}
}

// Parse reads the contents of /proc/<pid>/cgroup with the default layout.
func Parse(content []byte) (Location, error) { return DefaultLayout().Parse(content) }

// Parse reads the contents of /proc/<pid>/cgroup. A process in no job gives
// a zero Location and no error. A line that names a Slurm job but is
// malformed gives an error that says what is wrong; one that looks like a
// Slurm job's where slurmd makes none, a *Refused.
func (l Layout) Parse(content []byte) (Location, error) {
	var found Location
	var firstErr error
	for _, raw := range bytes.Split(content, []byte{'\n'}) {
		if len(raw) == 0 {
			continue
		}
		// hierarchy-ID:controller-list:path; the path may itself contain ':'.
		parts := bytes.SplitN(raw, []byte{':'}, 3)
		if len(parts) != 3 {
			if firstErr == nil {
				firstErr = fmt.Errorf("malformed cgroup line %q", truncate(raw))
			}
			continue
		}
		version := 1
		if string(parts[0]) == "0" && len(parts[1]) == 0 {
			version = 2
		}
		loc, ok, err := l.ParsePath(string(parts[2]), version)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if !ok {
			continue
		}
		if version == 1 {
			loc.Hierarchy = string(parts[1])
		}
		if !found.InJob {
			found = loc
			continue
		}
		// v1 repeats the path on every controller Slurm manages; on a hybrid
		// host a v2 job also shows a plain v1 line. Two different jobs
		// means someone moved the process by hand: refuse to guess.
		if found.JobKey() != loc.JobKey() {
			return Location{}, errConflict
		}
		// Keep the most specific line: proctrack's freezer hierarchy may
		// stop at the step while task/cgroup's go down to the task.
		if loc.Version > found.Version || loc.Version == found.Version && depth(loc) > depth(found) {
			found = loc
		}
	}
	if found.InJob {
		return found, nil
	}
	return Location{}, firstErr
}

// depth says how far down the job's tree a location goes.
func depth(l Location) int {
	d := 0
	if l.Step != "" {
		d++
	}
	if l.Task != "" || l.Stepd {
		d++
	}
	return d
}

// ParsePath recognises one cgroup path of the given hierarchy version with
// the default layout.
func ParsePath(path string, version int) (loc Location, ok bool, err error) {
	return DefaultLayout().ParsePath(path, version)
}

// ParsePath recognises one cgroup path of the given hierarchy version. ok is
// false when the path is not a Slurm job's; a Slurm-shaped path outside
// the layout's places is a *Refused.
func (l Layout) ParsePath(path string, version int) (loc Location, ok bool, err error) {
	if !strings.HasPrefix(path, "/") {
		return Location{}, false, nil
	}
	segs := strings.Split(path[1:], "/")
	parents := l.V1Parents
	parse, lookalike := parseV1, lookalikeV1
	if version == 2 {
		parents, parse, lookalike = l.V2Parents, parseV2, lookalikeV2
	}
	for _, parent := range parents {
		n, under := below(segs, parent)
		if !under {
			continue
		}
		var owned int
		loc, owned, ok, err = parse(segs[n:])
		if err != nil {
			return Location{}, false, fmt.Errorf("cgroup path %q: %w", truncate([]byte(path)), err)
		}
		if ok {
			loc.Version = version
			loc.Path = path
			loc.Slurm = "/" + strings.Join(segs[:n+owned], "/")
			return loc, true, nil
		}
	}
	if lookalike(segs) {
		return Location{}, false, &Refused{Reason: ReasonOutside, Path: path,
			Detail: fmt.Sprintf("slurmd makes its cgroups under %s", strings.Join(parents, " or "))}
	}
	return Location{}, false, nil
}

// below reports whether segs lie under the cgroup parent and how many
// segments the parent takes.
func below(segs []string, parent string) (int, bool) {
	p := strings.Trim(parent, "/")
	if p == "" {
		return 0, true
	}
	ps := strings.Split(p, "/")
	if len(ps) >= len(segs) {
		return 0, false
	}
	for i, s := range ps {
		if segs[i] != s {
			return 0, false
		}
	}
	return len(ps), true
}

// parseV2 reads what follows the scope's parent: the scope, the job, its
// step and task. owned is how many of segs slurmd keeps root's.
func parseV2(segs []string) (Location, int, bool, error) {
	node, isScope := scopeNode(segs[0])
	if !isScope {
		return Location{}, 0, false, nil
	}
	loc := Location{Node: node, UID: -1}
	rest := segs[1:]
	if len(rest) == 0 {
		return Location{}, 0, false, nil // slurmstepd.scope itself
	}
	switch {
	case rest[0] == "system" || rest[0] == "slurmd":
		// slurmd itself and the scope's "system" cgroup: Slurm's own
		// processes, in no job.
		return Location{}, 0, false, nil
	case strings.HasPrefix(rest[0], "job_"):
		id, err := jobID(rest[0])
		if err != nil {
			return Location{}, 0, false, err
		}
		loc.JobID = id
	case len(rest[0]) > 1 && rest[0][0] == 's':
		sluid := rest[0][1:]
		if err := checkSLUID(sluid); err != nil {
			return Location{}, 0, false, err
		}
		loc.SLUID = sluid
	default:
		return Location{}, 0, false, fmt.Errorf("unexpected directory %q under the slurmstepd scope", rest[0])
	}
	loc.InJob = true
	if err := stepAndTask(&loc, rest[1:], true); err != nil {
		return Location{}, 0, false, err
	}
	// scope, job, step_<s>, user|slurm: task_<n> and below are the user's.
	return loc, min(len(segs), 4), true, nil
}

// lookalikeV2 reports a slurmstepd scope with a job below it anywhere.
func lookalikeV2(segs []string) bool {
	for i, s := range segs {
		if _, ok := scopeNode(s); !ok || i+1 >= len(segs) {
			continue
		}
		next := segs[i+1]
		if strings.HasPrefix(next, "job_") || next != "system" && next != "slurmd" && len(next) > 1 && next[0] == 's' && checkSLUID(next[1:]) == nil {
			return true
		}
	}
	return false
}

// scopeNode recognises "slurmstepd.scope" and "<node>_slurmstepd.scope".
func scopeNode(s string) (string, bool) {
	const scope = "slurmstepd.scope"
	if s == scope {
		return "", true
	}
	node, ok := strings.CutSuffix(s, "_"+scope)
	if !ok || node == "" || !validNodeName(node) {
		return "", false
	}
	return node, true
}

// v1Root recognises "slurm" and "slurm_<node>".
func v1Root(s string) (string, bool) {
	if s == "slurm" {
		return "", true
	}
	if node, ok := strings.CutPrefix(s, "slurm_"); ok && validNodeName(node) {
		return node, true
	}
	return "", false
}

// parseV1 reads what follows the v1 root's parent: slurm[_<node>],
// uid_<uid>, the job, its step and task.
func parseV1(segs []string) (Location, int, bool, error) {
	node, ok := v1Root(segs[0])
	rest := segs[1:]
	// Require uid_<n> next, so an unrelated directory called "slurm" is
	// not taken for Slurm's.
	if !ok || len(rest) == 0 || !strings.HasPrefix(rest[0], "uid_") {
		return Location{}, 0, false, nil
	}
	uid, err := strconv.ParseUint(rest[0][len("uid_"):], 10, 32)
	if err != nil {
		return Location{}, 0, false, fmt.Errorf("malformed uid directory %q", rest[0])
	}
	loc := Location{Node: node, UID: int(uid)}
	if len(rest) < 2 {
		return Location{}, 0, false, nil // the user's directory, no job
	}
	id, err := jobID(rest[1])
	if err != nil {
		return Location{}, 0, false, err
	}
	loc.JobID, loc.InJob = id, true
	if err := stepAndTask(&loc, rest[2:], false); err != nil {
		return Location{}, 0, false, err
	}
	// slurm, uid_<uid>, job_<id>: Slurm hands the step's directories to
	// the job's user.
	return loc, 3, true, nil
}

// lookalikeV1 reports a Slurm v1 root with a user's job below it anywhere.
func lookalikeV1(segs []string) bool {
	for i, s := range segs {
		if _, ok := v1Root(s); ok && i+2 < len(segs) && strings.HasPrefix(segs[i+1], "uid_") && strings.HasPrefix(segs[i+2], "job_") {
			return true
		}
	}
	return false
}

func jobID(dir string) (string, error) {
	id, ok := strings.CutPrefix(dir, "job_")
	if !ok {
		return "", fmt.Errorf("expected job_<id>, got %q", dir)
	}
	if id == "" || len(id) > maxJobIDDigits || !allDigits(id) {
		return "", fmt.Errorf("malformed job directory %q", dir)
	}
	if _, err := strconv.ParseUint(id, 10, 32); err != nil {
		return "", fmt.Errorf("job id out of range in %q", dir)
	}
	if id[0] == '0' && len(id) > 1 {
		return "", fmt.Errorf("malformed job directory %q (leading zero)", dir)
	}
	return id, nil
}

// stepAndTask reads what follows the job directory:
//
//	v2: step_<s>/slurm | step_<s>/user/task_<n>[/...]
//	v1: step_<s>/task_<n>[/...] | step_<s>
func stepAndTask(loc *Location, rest []string, v2 bool) error {
	if len(rest) == 0 {
		return nil // in the job but above any step (e.g. job-level cgroup)
	}
	step, ok := strings.CutPrefix(rest[0], "step_")
	if !ok {
		if v2 && rest[0] == "user" {
			return nil // job-level user directory; no step
		}
		return fmt.Errorf("expected step_<s> after the job, got %q", rest[0])
	}
	if !validStep(step) {
		return fmt.Errorf("malformed step directory %q", rest[0])
	}
	loc.Step = step
	rest = rest[1:]
	if len(rest) == 0 {
		return nil
	}
	if v2 {
		switch rest[0] {
		case "slurm":
			loc.Stepd = true
			return nil
		case "user":
			rest = rest[1:]
			if len(rest) == 0 {
				return nil
			}
		default:
			return fmt.Errorf("unexpected directory %q in step", rest[0])
		}
	}
	task, ok := strings.CutPrefix(rest[0], "task_")
	if !ok {
		return fmt.Errorf("expected task_<n>, got %q", rest[0])
	}
	if task != "special" && (task == "" || len(task) > 10 || !allDigits(task)) {
		return fmt.Errorf("malformed task directory %q", rest[0])
	}
	loc.Task = task
	// Deeper directories (a container, a user's own sub-cgroup) stay in the
	// task: the job is what matters.
	return nil
}

func validStep(s string) bool {
	switch s {
	case "batch", "extern", "interactive":
		return true
	}
	if s == "" || len(s) > 21 {
		return false
	}
	// Numeric, or a heterogeneous job component "<step>+<component>".
	a, b, het := strings.Cut(s, "+")
	if het {
		return a != "" && b != "" && allDigits(a) && allDigits(b)
	}
	return allDigits(s)
}

func checkSLUID(s string) error {
	if len(s) < 6 || len(s) > 64 {
		return fmt.Errorf("malformed SLUID directory %q", "s"+s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("malformed SLUID directory %q", "s"+s)
		}
	}
	return nil
}

// validNodeName accepts what Slurm accepts in a NodeName that can appear in
// a path: letters, digits, '-', '.', '_'.
func validNodeName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
