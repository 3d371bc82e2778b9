// Process supervision: the daemons (munged, slurmctld, one slurmd per node)
// started, waited for and stopped, and SLURM's client commands run against
// the cluster.

package slurmtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type daemon struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (c *Cluster) startMunge(ctx context.Context) error {
	dir := filepath.Join(c.opts.WorkDir, "munge")
	key, err := c.mungeKey()
	if err != nil {
		return err
	}
	os.Remove(c.mungeSocket)
	// --force: munged runs as root here, and its socket directory sits in
	// a temp dir it would otherwise refuse as insecure.
	d, err := c.spawn("munged", nil, "munged", "--foreground", "--force",
		"--key-file="+key, "--socket="+c.mungeSocket,
		"--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed"),
		"--log-file="+filepath.Join(c.logDir, "munged.log"))
	if err != nil {
		return err
	}
	return c.poll(ctx, d, "munged to answer on "+c.mungeSocket, func() (bool, error) {
		return exec.Command("munge", "--socket="+c.mungeSocket, "--no-input").Run() == nil, nil
	})
}

func (c *Cluster) startCtld(ctx context.Context) error {
	d, err := c.spawn("slurmctld", c.env(), "slurmctld", "-D", "-i", "-f", c.conf)
	if err != nil {
		return err
	}
	return c.poll(ctx, d, "slurmctld to answer scontrol ping", func() (bool, error) {
		out, err := c.command(ctx, "scontrol", "ping")
		return err == nil && strings.Contains(out, "UP"), nil
	})
}

func (c *Cluster) waitNodesIdle(ctx context.Context) error {
	var last string
	err := c.poll(ctx, nil, "every node to be idle", func() (bool, error) {
		for _, d := range c.daemons {
			if d.exited() {
				return false, fmt.Errorf("%s exited: %v", d.name, d.err)
			}
		}
		out, err := c.command(ctx, "sinfo", "-h", "-N", "-o", "%N %t")
		last = out
		if err != nil {
			return false, nil
		}
		idle := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "idle" {
				idle++
			}
		}
		return idle == len(c.opts.Nodes), nil
	})
	if err != nil {
		return fmt.Errorf("%w (last sinfo: %q)", err, strings.TrimSpace(last))
	}
	return nil
}

// poll calls f every 100ms until it returns true, an error, d exits, or
// StartTimeout passes. Errors name the logs to read.
func (c *Cluster) poll(ctx context.Context, d *daemon, what string, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if err == nil && d != nil && d.exited() {
			err = fmt.Errorf("%s exited: %v", d.name, d.err)
		}
		if err == nil && ctx.Err() != nil {
			err = fmt.Errorf("timed out after %v", c.opts.StartTimeout)
		}
		if err != nil {
			return fmt.Errorf("slurmtest: waiting for %s: %w; logs in %s:\n%s", what, err, c.logDir, c.logTails())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logTails returns the last lines of every log, for error messages.
func (c *Cluster) logTails() string {
	var b strings.Builder
	paths, _ := filepath.Glob(filepath.Join(c.logDir, "*"))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", p, strings.Join(lines, "\n"))
	}
	return b.String()
}

// env is the environment for daemons and client commands: just enough to
// find the programs and this cluster's config, and nothing from a SLURM job
// the caller might itself be running in.
func (c *Cluster) env() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SLURM_CONF=" + c.conf,
		"LANG=C.UTF-8",
	}
}

// spawn starts a long-running daemon in the foreground with its output in
// log/<name>.out, in its own process group so Stop can signal its helpers.
func (c *Cluster) spawn(name string, env []string, prog string, args ...string) (*daemon, error) {
	logPath := filepath.Join(c.logDir, name+".out")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(prog, args...)
	cmd.Env = env
	cmd.Dir = c.opts.WorkDir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("slurmtest: starting %s: %w", name, err)
	}
	f.Close()
	d := &daemon{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	c.daemons = append(c.daemons, d)
	c.logf("started %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	return d, nil
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// command runs a SLURM client as root against this cluster.
func (c *Cluster) command(ctx context.Context, prog string, args ...string) (string, error) {
	return c.run(ctx, nil, prog, args...)
}

// run runs prog, as u when u is not nil, and returns its stdout.
func (c *Cluster) run(ctx context.Context, u *User, prog string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = c.env()
	cmd.Dir = c.jobDir
	if u != nil {
		cmd.Env = append(cmd.Env, "USER="+u.Name, "LOGNAME="+u.Name, "HOME="+c.jobDir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: uint32(u.UID), Gid: uint32(u.UID), Groups: []uint32{}, // #nosec G115 -- the harness's own users, with the small uids it chose
		}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		who := "root"
		if u != nil {
			who = u.Name
		}
		return stdout.String(), fmt.Errorf("%s %s (as %s): %w: %s", prog, strings.Join(args, " "), who, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// cancelJobs cancels every job and waits, up to 10 s, until squeue lists
// none.
func (c *Cluster) cancelJobs() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := c.command(ctx, "squeue", "-h", "-o", "%A"); err == nil && strings.TrimSpace(out) != "" {
		ids := strings.Fields(out)
		c.command(ctx, "scancel", ids...)
		for ctx.Err() == nil {
			out, err := c.command(ctx, "squeue", "-h", "-o", "%A")
			if err != nil || strings.TrimSpace(out) == "" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// stopDaemons stops every daemon and its process group: slurmd before
// slurmctld before munged, each asked politely first (SIGTERM, then SIGKILL
// after 5 s).
func (c *Cluster) stopDaemons() {
	for i := len(c.daemons) - 1; i >= 0; i-- {
		d := c.daemons[i]
		if d.exited() {
			continue
		}
		syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	}
	c.daemons = nil
}
