package slurmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Sbatch submits script as user, with args placed before the script (e.g.
// "-J", name, "--array=1-2", "-N2"), and returns the job id sbatch prints;
// for an array that is the array's id, see Jobs for the tasks'. The job
// runs in JobDir and writes its output there unless args say otherwise.
func (c *Cluster) Sbatch(ctx context.Context, userName string, args []string, script string) (string, error) {
	u, ok := c.users[userName]
	if !ok {
		return "", fmt.Errorf("slurmtest: unknown user %q (configure it in Options.Users)", userName)
	}
	f, err := os.CreateTemp(c.jobDir, "job-*.sh")
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(script, "#!") {
		script = "#!/bin/sh\n" + script
	}
	_, err = f.WriteString(script)
	f.Close()
	if err != nil {
		return "", err
	}
	if err := os.Chmod(f.Name(), 0o755); err != nil {
		return "", err
	}
	full := append([]string{"--parsable", "--chdir=" + c.jobDir, "--output=" + filepath.Join(c.jobDir, "slurm-%j.out")}, args...)
	out, err := c.run(ctx, &u, "sbatch", append(full, f.Name())...)
	if err != nil {
		return "", fmt.Errorf("slurmtest: %w (slurmctld log %s)", err, filepath.Join(c.logDir, "slurmctld.log"))
	}
	// --parsable prints "<id>" or "<id>;<cluster>".
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if id == "" {
		return "", fmt.Errorf("slurmtest: sbatch printed no job id")
	}
	return id, nil
}

// Job is one line of squeue: for an array, one array task.
type Job struct {
	JobID      string // the task's own job id (squeue %A)
	ArrayJobID string // %F; equals JobID for a job that is not an array
	ArrayTask  string // %K; "N/A" when not an array task
	State      string // RUNNING, PENDING, ...
	Nodes      []string
	User       string
	Account    string
	Partition  string
	Name       string
}

// Jobs returns squeue's view of id: the job itself, or every task of an
// array, pending tasks expanded (-r).
func (c *Cluster) Jobs(ctx context.Context, id string) ([]Job, error) {
	// The name goes last: it is the one field that may hold the separator.
	out, err := c.command(ctx, "squeue", "-h", "-r", "-j", id, "-o", "%A|%F|%K|%T|%N|%u|%a|%P|%j")
	if err != nil {
		return nil, err
	}
	var jobs []Job
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.SplitN(l, "|", 9)
		if len(f) != 9 {
			continue
		}
		j := Job{JobID: f[0], ArrayJobID: f[1], ArrayTask: f[2], State: f[3], User: f[5], Account: f[6], Partition: f[7], Name: f[8]}
		if f[4] != "" {
			hosts, err := c.command(ctx, "scontrol", "show", "hostnames", f[4])
			if err != nil {
				return nil, err
			}
			j.Nodes = strings.Fields(hosts)
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// WaitState polls until every job (or array task) of id is in state, and
// returns them. It fails early if a job reaches a final state instead.
func (c *Cluster) WaitState(ctx context.Context, id, state string, timeout time.Duration) ([]Job, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []Job
	for {
		jobs, err := c.Jobs(ctx, id)
		if err == nil && len(jobs) > 0 {
			last = jobs
			all := true
			for _, j := range jobs {
				if j.State != state {
					all = false
				}
				switch j.State {
				case "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "COMPLETED":
					if j.State != state {
						return jobs, fmt.Errorf("slurmtest: job %s is %s, not %s; see %s and %s", j.JobID, j.State, state, c.jobDir, c.logDir)
					}
				}
			}
			if all {
				return jobs, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("slurmtest: job %s not %s after %v (last seen %+v); logs in %s", id, state, timeout, last, c.logDir)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Cancel cancels jobs (or whole arrays) by id.
func (c *Cluster) Cancel(ctx context.Context, ids ...string) error {
	_, err := c.command(ctx, "scancel", ids...)
	return err
}

// StartAs starts a process as userName outside any job, with env added to a
// minimal environment. It is for processes that look like job members but
// are not (a login shell that inherited SLURM_JOB_ID); the caller kills it.
func (c *Cluster) StartAs(userName string, env []string, prog string, args ...string) (*exec.Cmd, error) {
	u, ok := c.users[userName]
	if !ok {
		return nil, fmt.Errorf("slurmtest: unknown user %q", userName)
	}
	cmd := exec.Command(prog, args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "USER=" + u.Name, "HOME=" + c.jobDir}, env...)
	cmd.Dir = c.jobDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(u.UID), Gid: uint32(u.UID), Groups: []uint32{}, // #nosec G115 -- the harness's own users, with the small uids it chose
	}}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}
