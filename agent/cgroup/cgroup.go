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
// Anything may precede the Slurm part (a nested cgroup namespace, a
// container runtime). The parser never trusts its input: a path that looks
// like Slurm's but is malformed is an error, and a process is never placed in
// a job on a guess.
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
	// directory is a SLUID, whose job id must come from the job itself.
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
	Path    string
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

// Parse reads the contents of /proc/<pid>/cgroup. A process in no job gives
// a zero Location and no error. A line that names a Slurm job but is
// malformed gives an error that says what is wrong.
func Parse(content []byte) (Location, error) {
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
		loc, ok, err := ParsePath(string(parts[2]), version)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if !ok {
			continue
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

// ParsePath recognises one cgroup path of the given hierarchy version. ok is
// false when the path is not a Slurm job's.
func ParsePath(path string, version int) (loc Location, ok bool, err error) {
	if !strings.HasPrefix(path, "/") {
		return Location{}, false, nil
	}
	segs := strings.Split(path[1:], "/")
	if version == 2 {
		loc, ok, err = parseV2(segs)
	} else {
		loc, ok, err = parseV1(segs)
	}
	if err != nil {
		return Location{}, false, fmt.Errorf("cgroup path %q: %w", truncate([]byte(path)), err)
	}
	if ok {
		loc.Version = version
		loc.Path = path
	}
	return loc, ok, nil
}

func parseV2(segs []string) (Location, bool, error) {
	for i, s := range segs {
		node, isScope := scopeNode(s)
		if !isScope {
			continue
		}
		loc := Location{Node: node, UID: -1}
		rest := segs[i+1:]
		if len(rest) == 0 {
			return Location{}, false, nil // slurmstepd.scope itself
		}
		switch {
		case rest[0] == "system" || rest[0] == "slurmd":
			// slurmd itself and the scope's "system" cgroup: Slurm's own
			// processes, in no job.
			return Location{}, false, nil
		case strings.HasPrefix(rest[0], "job_"):
			id, err := jobID(rest[0])
			if err != nil {
				return Location{}, false, err
			}
			loc.JobID = id
		case len(rest[0]) > 1 && rest[0][0] == 's':
			sluid := rest[0][1:]
			if err := checkSLUID(sluid); err != nil {
				return Location{}, false, err
			}
			loc.SLUID = sluid
		default:
			return Location{}, false, fmt.Errorf("unexpected directory %q under the slurmstepd scope", rest[0])
		}
		loc.InJob = true
		if err := stepAndTask(&loc, rest[1:], true); err != nil {
			return Location{}, false, err
		}
		return loc, true, nil
	}
	return Location{}, false, nil
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

func parseV1(segs []string) (Location, bool, error) {
	for i, s := range segs {
		var node string
		switch {
		case s == "slurm":
		case strings.HasPrefix(s, "slurm_") && validNodeName(s[len("slurm_"):]):
			node = s[len("slurm_"):]
		default:
			continue
		}
		rest := segs[i+1:]
		// Require uid_<n> next, so an unrelated directory called "slurm"
		// is not taken for Slurm's.
		if len(rest) == 0 || !strings.HasPrefix(rest[0], "uid_") {
			continue
		}
		uid, err := strconv.ParseUint(rest[0][len("uid_"):], 10, 32)
		if err != nil {
			return Location{}, false, fmt.Errorf("malformed uid directory %q", rest[0])
		}
		loc := Location{Node: node, UID: int(uid)}
		if len(rest) < 2 {
			return Location{}, false, nil // the user's directory, no job
		}
		id, err := jobID(rest[1])
		if err != nil {
			return Location{}, false, err
		}
		loc.JobID, loc.InJob = id, true
		if err := stepAndTask(&loc, rest[2:], false); err != nil {
			return Location{}, false, err
		}
		return loc, true, nil
	}
	return Location{}, false, nil
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
