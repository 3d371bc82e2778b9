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
	// GRES is what the job holds, per node name; nil when the answer did
	// not say (a slurmctld that does not print it).
	GRES map[string][]GRES
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
	Slurmd   string // likewise, for NodeGRES
	Timeout  time.Duration
	// run is exec by default; tests replace it.
	run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

var _ Controller = (*Commands)(nil)

func (c *Commands) exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return c.execTo(ctx, false, name, args...)
}

// execTo runs a command and returns its stdout, or with both its stdout
// and stderr (slurmd -G logs its answer).
func (c *Commands) execTo(ctx context.Context, both bool, name string, args ...string) ([]byte, error) {
	if c.run != nil {
		return c.run(ctx, name, args...)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if both {
		cmd.Stderr = &stdout
	}
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %v: %s", name, err, clip(strings.TrimSpace(stderr.String()+" "+stdout.String())))
	}
	return stdout.Bytes(), nil
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
	out, err2 := c.exec(ctx, scontrol, "show", "job", "-d", "-o", id)
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
			JobID      number          `json:"job_id"`
			Name       string          `json:"name"`
			UserName   string          `json:"user_name"`
			UserID     number          `json:"user_id"`
			Account    string          `json:"account"`
			Partition  string          `json:"partition"`
			GRESDetail []string        `json:"gres_detail"`
			Resources  json.RawMessage `json:"job_resources"`
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
		gres, err := squeueGRES(j.GRESDetail, j.Resources)
		if err != nil {
			return JobInfo{}, fmt.Errorf("squeue --json, job %s: %w", id, err)
		}
		info.GRES = gres
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

// squeueGRES pairs gres_detail, one entry per node of the allocation, with
// the allocation's node names: job_resources.allocated_nodes (22.05 to
// 23.11) or job_resources.nodes.allocation (24.05 and later). nil when
// the answer has neither.
func squeueGRES(detail []string, res json.RawMessage) (map[string][]GRES, error) {
	if len(res) == 0 || string(res) == "null" {
		return nil, nil
	}
	var r struct {
		Allocated []struct {
			Name string `json:"nodename"`
		} `json:"allocated_nodes"`
		Nodes json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, fmt.Errorf("job_resources: %w", err)
	}
	var names []string
	for _, n := range r.Allocated {
		names = append(names, n.Name)
	}
	if len(names) == 0 && len(r.Nodes) > 0 && r.Nodes[0] == '{' {
		var nodes struct {
			Allocation []struct {
				Name string `json:"name"`
			} `json:"allocation"`
		}
		if err := json.Unmarshal(r.Nodes, &nodes); err != nil {
			return nil, fmt.Errorf("job_resources.nodes: %w", err)
		}
		for _, n := range nodes.Allocation {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	out := map[string][]GRES{}
	if len(detail) == 0 { // the job holds no GRES anywhere
		for _, n := range names {
			out[n] = []GRES{}
		}
		return out, nil
	}
	if len(detail) != len(names) {
		return nil, fmt.Errorf("gres_detail has %d entries for %d nodes", len(detail), len(names))
	}
	for i, d := range detail {
		g, err := ParseGRESDetail(d)
		if err != nil {
			return nil, err
		}
		out[names[i]] = g
	}
	return out, nil
}

// reScNodeGRES matches the per-node lines of `scontrol show job -d`.
var reScNodeGRES = regexp.MustCompile(`(?:^|\s)Nodes=(\S+) CPU_IDs=\S* Mem=\S* GRES=(\S*)`)

// ParseScontrolOneLiner parses `scontrol show job -d -o <id>`. Job names are
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
	// The per-node lines sit between the owner's fields and MinCPUsNode=;
	// the job name before them and the fields a user names after them
	// (Comment, Command, WorkDir, ...) could imitate them.
	head := line[reScName.FindStringIndex(line)[1]:]
	if strings.Count(line, " UserId=") != 1 {
		head = "" // the name imitates the owner's fields: where it ends is unknown
	}
	if i := strings.Index(head, " MinCPUsNode="); i >= 0 {
		head = head[:i]
	} else {
		head = ""
	}
	if ms := reScNodeGRES.FindAllStringSubmatch(head, -1); ms != nil {
		info.GRES = map[string][]GRES{}
		for _, m := range ms {
			hosts, err := ExpandHostlist(m[1])
			if err != nil {
				return JobInfo{}, fmt.Errorf("scontrol, job %s: %w", id, err)
			}
			g, err := ParseGRESDetail(m[2])
			if err != nil {
				return JobInfo{}, fmt.Errorf("scontrol, job %s: %w", id, err)
			}
			for _, h := range hosts {
				info.GRES[h] = g
			}
		}
	}
	return info, nil
}
