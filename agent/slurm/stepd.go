package slurm

import (
	"bytes"
	"strconv"
	"strings"
)

// ParseStepdTitle reads the title slurmstepd writes over its command line,
// "slurmstepd: [<job id>.<step>]" (with " stepmgr" before the bracket on a
// step manager), and returns the job id and the step as cgroup paths name
// it (0, batch, extern, interactive, or <step>+<het component>). The title
// is root's: it names the job a SLUID directory belongs to, where the
// tasks' SLURM_JOB_ID, which their user sets, cannot.
func ParseStepdTitle(cmdline []byte) (jobID, step string, ok bool) {
	if i := bytes.IndexByte(cmdline, 0); i >= 0 {
		cmdline = cmdline[:i]
	}
	rest, ok := strings.CutPrefix(string(cmdline), "slurmstepd: [")
	if !ok {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(rest, "]")
	if !ok {
		return "", "", false
	}
	rest, _ = strings.CutSuffix(rest, " stepmgr")
	id, step, ok := strings.Cut(rest, ".")
	if !ok || id == "" || len(id) > 10 || id[0] == '0' {
		return "", "", false
	}
	if n, err := strconv.ParseUint(id, 10, 32); err != nil || strconv.FormatUint(n, 10) != id {
		return "", "", false
	}
	if !validTitleStep(step) {
		return "", "", false
	}
	return id, step, true
}

func validTitleStep(s string) bool {
	switch s {
	case "batch", "extern", "interactive":
		return true
	}
	a, b, het := strings.Cut(s, "+")
	if het && !digits(b) {
		return false
	}
	return digits(a) && len(s) <= 21
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
