package cgroup

import "strings"

// JobDir is the job's own cgroup directory in l's hierarchy (the path up to
// job_<id> or s<SLUID>), as /proc/<pid>/cgroup shows it; "" when l is not
// in a job. Its files (cpu.stat, memory.peak, ...) describe the whole job on
// this node.
func (l Location) JobDir() string {
	segs, i := l.jobSegment()
	if i < 0 {
		return ""
	}
	return "/" + strings.Join(segs[:i+1], "/")
}

// StepDir is the directory of l's step (JobDir/step_<s>); "" when l sits
// above any step.
func (l Location) StepDir() string {
	segs, i := l.jobSegment()
	if i < 0 || l.Step == "" || i+1 >= len(segs) {
		return ""
	}
	return "/" + strings.Join(segs[:i+2], "/")
}

// jobSegment splits l.Path and finds the job's directory in it, the way
// ParsePath did: the first Slurm scope (v2) or slurm[_<node>]/uid_<n> (v1)
// from the left.
func (l Location) jobSegment() ([]string, int) {
	if !l.InJob || !strings.HasPrefix(l.Path, "/") {
		return nil, -1
	}
	segs := strings.Split(l.Path[1:], "/")
	for i, s := range segs {
		if l.Version == 2 {
			if _, ok := scopeNode(s); ok && i+1 < len(segs) {
				return segs, i + 1
			}
			continue
		}
		if (s == "slurm" || strings.HasPrefix(s, "slurm_") && validNodeName(s[len("slurm_"):])) &&
			i+2 < len(segs) && strings.HasPrefix(segs[i+1], "uid_") {
			return segs, i + 2
		}
	}
	return nil, -1
}
