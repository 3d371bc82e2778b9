// Package slurm holds what the agent learns about a job beyond its cgroup:
// its name, account and partition, from the job's own tasks or from
// slurmctld.
package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Environment variables slurmstepd sets in every task. SLURM_JOB_USER is
// deliberately absent: the job's owner can set it to anything.
const (
	EnvJobID        = "SLURM_JOB_ID"
	EnvJobName      = "SLURM_JOB_NAME"
	EnvJobAccount   = "SLURM_JOB_ACCOUNT"
	EnvJobPartition = "SLURM_JOB_PARTITION"
)

// EnvKeys are the keys the agent reads from a task's environment.
var EnvKeys = []string{EnvJobID, EnvJobName, EnvJobAccount, EnvJobPartition}

// JobInfo is job metadata from slurmctld, which the job's user cannot forge.
type JobInfo struct {
	ID        string
	Name      string
	User      string
	UID       int
	Account   string
	Partition string
}

// Controller asks slurmctld about a job.
type Controller interface {
	Job(ctx context.Context, id string) (JobInfo, error)
}

// ErrNoSuchJob means slurmctld does not know the job (it ended, or the id is bogus).
var ErrNoSuchJob = errors.New("slurmctld does not know the job")

// Commands queries slurmctld through the Slurm client commands, which is how
// every node already talks to it (munge auth, the node's slurm.conf).
// squeue --json is preferred because it quotes job names; scontrol's
// one-line output is the fallback for builds without the JSON plugin.
type Commands struct {
	Squeue   string // path or name of squeue; "" means "squeue"
	Scontrol string // likewise
	Timeout  time.Duration
	// run is exec by default; tests replace it.
	run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

var _ Controller = (*Commands)(nil)

func (c *Commands) exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	if c.run != nil {
		return c.run(ctx, name, args...)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Job implements Controller.
func (c *Commands) Job(ctx context.Context, id string) (JobInfo, error) {
	if _, err := strconv.ParseUint(id, 10, 32); err != nil {
		return JobInfo{}, fmt.Errorf("invalid job id %q", id)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	squeue := c.Squeue
	if squeue == "" {
		squeue = "squeue"
	}
	out, err := c.exec(ctx, squeue, "--json", "--jobs="+id)
	if err == nil {
		info, perr := ParseSqueueJSON(out, id)
		if perr == nil || errors.Is(perr, ErrNoSuchJob) {
			return info, perr
		}
		err = perr
	}
	scontrol := c.Scontrol
	if scontrol == "" {
		scontrol = "scontrol"
	}
	out, err2 := c.exec(ctx, scontrol, "show", "job", "-o", id)
	if err2 != nil {
		return JobInfo{}, fmt.Errorf("slurmctld lookup of job %s: squeue: %v; scontrol: %w", id, err, err2)
	}
	return ParseScontrolOneLiner(out, id)
}

// number accepts both encodings squeue has used: a bare number (22.05) and
// {"set":true,"number":N} (23.02 and later).
type number struct {
	v   int64
	set bool
}

func (n *number) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '{' {
		var o struct {
			Set    bool  `json:"set"`
			Number int64 `json:"number"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		n.v, n.set = o.Number, o.Set
		return nil
	}
	if err := json.Unmarshal(b, &n.v); err != nil {
		return err
	}
	n.set = true
	return nil
}

// ParseSqueueJSON extracts job id from the output of `squeue --json`.
func ParseSqueueJSON(b []byte, id string) (JobInfo, error) {
	var doc struct {
		Jobs []struct {
			JobID     number `json:"job_id"`
			Name      string `json:"name"`
			UserName  string `json:"user_name"`
			UserID    number `json:"user_id"`
			Account   string `json:"account"`
			Partition string `json:"partition"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return JobInfo{}, fmt.Errorf("squeue --json: %w", err)
	}
	for _, j := range doc.Jobs {
		if !j.JobID.set || strconv.FormatInt(j.JobID.v, 10) != id {
			continue
		}
		info := JobInfo{ID: id, Name: j.Name, User: j.UserName, UID: -1, Account: j.Account, Partition: j.Partition}
		if j.UserID.set {
			info.UID = int(j.UserID.v)
		}
		return info, nil
	}
	return JobInfo{}, ErrNoSuchJob
}

var (
	reScJobID = regexp.MustCompile(`(?:^|\s)JobId=(\d+)\s`)
	// UserId=name(uid) GroupId= follows JobName; anchoring on that whole
	// shape keeps a job name that contains " UserId=" from fooling us.
	reScName   = regexp.MustCompile(`(?s)\sJobName=(.*?)\sUserId=([^\s(]*)\((\d+)\)\sGroupId=`)
	reScAcct   = regexp.MustCompile(`\sAccount=(\S*)`)
	reScPartit = regexp.MustCompile(`\sPartition=(\S*)`)
)

// ParseScontrolOneLiner parses `scontrol show job -o <id>`. Job names are
// not quoted in this format, so the name is taken as everything between
// "JobName=" and the user/group fields that always follow it.
func ParseScontrolOneLiner(b []byte, id string) (JobInfo, error) {
	line := string(b)
	if strings.Contains(line, "Invalid job id") {
		return JobInfo{}, ErrNoSuchJob
	}
	m := reScJobID.FindStringSubmatch(line)
	if m == nil || m[1] != id {
		return JobInfo{}, fmt.Errorf("scontrol output does not describe job %s", id)
	}
	n := reScName.FindStringSubmatch(line)
	if n == nil {
		return JobInfo{}, fmt.Errorf("scontrol output for job %s has no JobName/UserId", id)
	}
	info := JobInfo{ID: id, Name: n[1], UID: -1}
	// A job name may itself contain " UserId=x(1) GroupId=". The owner is
	// trusted only when the line holds exactly one such field.
	if strings.Count(line, " UserId=") == 1 {
		info.User = n[2]
		info.UID, _ = strconv.Atoi(n[3])
	}
	if a := reScAcct.FindStringSubmatch(line); a != nil && a[1] != "(null)" {
		info.Account = a[1]
	}
	if p := reScPartit.FindStringSubmatch(line); p != nil && p[1] != "(null)" {
		info.Partition = p[1]
	}
	return info, nil
}
