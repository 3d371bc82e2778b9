// Host changes a cluster needs: the host-wide lock, the work directory and
// its munge key, the test users and /etc/hosts (config.go writes the
// configuration files and the cgroup v2 shim, cgroup.go handles the
// cgroups).

package slurmtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockPath serialises clusters across processes: go test runs packages in
// parallel, and two clusters would share node names, cgroups and users.
const lockPath = "/run/slurmscope-slurmtest.lock"

func acquireHostLock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("slurmtest: %w", err)
	}
	for {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			return f, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("slurmtest: waiting for another test cluster to stop: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Cluster) mkdirs() error {
	wd := c.opts.WorkDir
	for _, d := range []string{"", "etc", "munge", "log", "state", "spool", "run", "jobs"} {
		if err := os.MkdirAll(filepath.Join(wd, d), 0o755); err != nil {
			return err
		}
	}
	// The test users' sbatch reads slurm.conf and connects to the munge
	// socket, and their jobs write output to jobs/: everything above must
	// be traversable, whatever umask or MkdirTemp chose.
	for _, d := range []string{wd, filepath.Join(wd, "etc"), filepath.Join(wd, "munge")} {
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(c.jobDir, 0o1777); err != nil {
		return err
	}
	for p := filepath.Dir(wd); p != "/"; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("slurmtest: %s is not traversable by other users (mode %v); the test users cannot reach the work dir %s", p, st.Mode().Perm(), wd)
		}
	}
	return nil
}

func (c *Cluster) ensureUsers() error {
	for _, u := range c.opts.Users {
		if existing, err := user.Lookup(u.Name); err == nil {
			uid, _ := strconv.Atoi(existing.Uid)
			c.users[u.Name] = User{u.Name, uid}
			continue
		}
		gid := strconv.Itoa(u.UID)
		if _, err := user.LookupGroupId(gid); err != nil {
			if out, err := exec.Command("groupadd", "-g", gid, u.Name).CombinedOutput(); err != nil {
				return fmt.Errorf("slurmtest: groupadd %s: %v: %s", u.Name, err, out)
			}
		}
		out, err := exec.Command("useradd", "-u", strconv.Itoa(u.UID), "-g", gid, "-M", "-d", "/nonexistent", "-s", "/bin/sh", u.Name).CombinedOutput()
		if err != nil {
			return fmt.Errorf("slurmtest: useradd %s: %v: %s", u.Name, err, out)
		}
		c.logf("created user %s (uid %d)", u.Name, u.UID)
		c.users[u.Name] = u
	}
	return nil
}

// mungeKey returns the cluster's munge key, made (1 KiB of random bytes,
// mode 0400) in the work dir if it is not there yet.
func (c *Cluster) mungeKey() (string, error) {
	key := filepath.Join(c.opts.WorkDir, "munge", "munge.key")
	if _, err := os.Stat(key); err != nil {
		b := make([]byte, 1024)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		if err := os.WriteFile(key, b, 0o400); err != nil {
			return "", err
		}
	}
	return key, nil
}

const hostsMarker = "# added by slurmscope internal/testenv/slurmtest"

// ensureHostResolves adds "127.0.0.1 <hostname>" to /etc/hosts when the
// hostname does not resolve: slurmd and slurmctld look their own name up.
func (c *Cluster) ensureHostResolves() error {
	if addrs, err := net.LookupHost(c.host); err == nil && len(addrs) > 0 {
		return nil
	}
	line := "127.0.0.1 " + c.host + " " + hostsMarker
	f, err := os.OpenFile("/etc/hosts", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("slurmtest: hostname %q does not resolve and /etc/hosts cannot be amended: %w", c.host, err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		return err
	}
	c.hostsLine = line
	c.logf("added %q to /etc/hosts", line)
	return nil
}

func (c *Cluster) restoreHosts() error {
	if c.hostsLine == "" {
		return nil
	}
	b, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return err
	}
	var keep []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.TrimRight(l, "\n") != c.hostsLine {
			keep = append(keep, l)
		}
	}
	c.hostsLine = ""
	return os.WriteFile("/etc/hosts", []byte(strings.Join(keep, "")), 0o644)
}
