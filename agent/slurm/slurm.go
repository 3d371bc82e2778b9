// Package slurm holds what the agent learns about a job beyond its cgroup:
// its metadata (schema.Metadata: name, account, partition, ...), from the
// job's own tasks or from slurmctld, each attribute read where the schema
// says; and what a process's environment says of its task (task.go).
package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/schema"
)

// EnvJobID is the variable slurmstepd sets in every task to the job's id.
// It never decides the id; an environment that names another job does not
// describe this one.
var EnvJobID = schema.JobID.From.Env

// EnvKeys are the variables to read from a task's environment for the
// metadata attributes attrs: EnvJobID, then each attribute's. The owner has
// none: SLURM_JOB_USER is the user's to set.
func EnvKeys(attrs []schema.Attribute) []string {
	keys := []string{EnvJobID}
	for _, a := range attrs {
		if a.From.Decide&schema.FromEnv != 0 && a.From.Env != "" && !slices.Contains(keys, a.From.Env) {
			keys = append(keys, a.From.Env)
		}
	}
	return keys
}

// JobInfo is job metadata from slurmctld, which the job's user cannot forge.
type JobInfo struct {
	ID   string
	User string
	UID  int
	// Meta holds the metadata attributes asked for (Commands.Attributes)
	// by name, those slurmctld gave a value.
	Meta map[string]string
	// GRES is what the job holds, per node name; nil when the answer did
	// not say (a slurmctld that does not print it).
	GRES map[string][]GRES
}

// Value is the job's value of metadata attribute a; "" when not given.
func (i JobInfo) Value(a schema.Attribute) string { return i.Meta[a.Name] }

func (i *JobInfo) set(a schema.Attribute, v string) {
	if v == "" {
		return
	}
	if i.Meta == nil {
		i.Meta = map[string]string{}
	}
	i.Meta[a.Name] = v
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
	// Attributes are the metadata attributes to read; default
	// schema.Metadata().
	Attributes []schema.Attribute
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
	attrs := c.Attributes
	if attrs == nil {
		attrs = schema.Metadata()
	}
	out, err := c.exec(ctx, squeue, "--json", "--jobs="+id)
	if err == nil {
		info, perr := parseSqueueJSON(out, id, attrs)
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
	return parseScontrolOneLiner(out, id, attrs)
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

// ParseSqueueJSON extracts job id from the output of `squeue --json`, with
// the schema's metadata attributes.
func ParseSqueueJSON(b []byte, id string) (JobInfo, error) {
	return parseSqueueJSON(b, id, schema.Metadata())
}

// squeueJob is a job object of squeue --json: its fields by name, as the
// schema names them.
type squeueJob map[string]json.RawMessage

// str is the string field f, "" when absent or not a string (a field
// whose encoding another release changed says nothing, rather than
// failing the answer).
func (j squeueJob) str(f string) string {
	var s string
	if raw, ok := j[f]; !ok || f == "" || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func (j squeueJob) number(f string) (number, error) {
	var n number
	if raw, ok := j[f]; ok {
		if err := json.Unmarshal(raw, &n); err != nil {
			return n, fmt.Errorf("%s: %w", f, err)
		}
	}
	return n, nil
}

func parseSqueueJSON(b []byte, id string, attrs []schema.Attribute) (JobInfo, error) {
	var doc struct {
		Jobs []squeueJob `json:"jobs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return JobInfo{}, fmt.Errorf("squeue --json: %w", err)
	}
	for _, j := range doc.Jobs {
		jobID, err := j.number(schema.JobID.From.Squeue)
		if err != nil {
			return JobInfo{}, fmt.Errorf("squeue --json: %w", err)
		}
		if !jobID.set || strconv.FormatInt(jobID.v, 10) != id {
			continue
		}
		info := JobInfo{ID: id, User: j.str(schema.JobUser.From.Squeue), UID: -1}
		for _, a := range attrs {
			if a.From.Decide&schema.FromSlurmctld != 0 {
				info.set(a, j.str(a.From.Squeue))
			}
		}
		// user_id sits beside the schema's user_name: the owner's uid,
		// which the node compares with its own.
		if uid, err := j.number("user_id"); err != nil {
			return JobInfo{}, fmt.Errorf("squeue --json, job %s: %w", id, err)
		} else if uid.set {
			info.UID = int(uid.v)
		}
		var detail []string
		if raw, ok := j["gres_detail"]; ok {
			if err := json.Unmarshal(raw, &detail); err != nil {
				return JobInfo{}, fmt.Errorf("squeue --json, job %s: gres_detail: %w", id, err)
			}
		}
		gres, err := squeueGRES(detail, j["job_resources"])
		if err != nil {
			return JobInfo{}, fmt.Errorf("squeue --json, job %s: %w", id, err)
		}
		info.GRES = gres
		return info, nil
	}
	return JobInfo{}, ErrNoSuchJob
}

var (
	reScJobID = regexp.MustCompile(`(?:^|\s)` + schema.JobID.From.Scontrol + `=(\d+)\s`)
	// UserId=name(uid) GroupId= follows JobName; anchoring on that whole
	// shape keeps a job name that contains " UserId=" from fooling us.
	reScName = regexp.MustCompile(`(?s)\s` + schema.JobName.From.Scontrol + `=(.*?)\s` + schema.JobUser.From.Scontrol + `=([^\s(]*)\((\d+)\)\sGroupId=`)
)

// scontrolField is the value of key in the fields of a one-liner, the
// first such field: "" when absent or (null).
func scontrolField(fields, key string) string {
	if key == "" {
		return ""
	}
	i := strings.Index(fields, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := fields[i+len(key)+2:]
	if end := strings.IndexAny(v, " \t\n"); end >= 0 {
		v = v[:end]
	}
	if v == "(null)" {
		return ""
	}
	return v
}

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

// ParseScontrolOneLiner parses `scontrol show job -d -o <id>`, with the
// schema's metadata attributes. Job names are not quoted in this format,
// so the name is taken as everything between "JobName=" and the user/group
// fields that always follow it.
func ParseScontrolOneLiner(b []byte, id string) (JobInfo, error) {
	return parseScontrolOneLiner(b, id, schema.Metadata())
}

func parseScontrolOneLiner(b []byte, id string, attrs []schema.Attribute) (JobInfo, error) {
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
	info := JobInfo{ID: id, UID: -1}
	info.set(schema.JobName, n[1])
	// What follows the owner's fields is slurmctld's up to the fields a
	// user names (Comment, Command, WorkDir, ...), which come after every
	// metadata field. A job name may itself contain " UserId=x(1)
	// GroupId=": then where the name ends is unknown, and neither the
	// owner nor any field after it is trusted.
	trusted := strings.Count(line, " "+schema.JobUser.From.Scontrol+"=") == 1
	head := ""
	if trusted {
		info.User = n[2]
		info.UID, _ = strconv.Atoi(n[3])
		head = line[reScName.FindStringIndex(line)[1]:]
	}
	for _, a := range attrs {
		if a.From.Decide&schema.FromSlurmctld != 0 && a.Name != schema.JobName.Name {
			info.set(a, scontrolField(head, a.From.Scontrol))
		}
	}
	// The per-node lines sit between the owner's fields and MinCPUsNode=.
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
