// Package memcg makes a memory-limited cgroup for tests that run a process
// under the limit systemd would give it (the agent's unit says MemoryMax),
// and reads what the kernel says about it afterwards: its peak and whether
// the OOM killer acted. It uses cgroup v2's memory controller where the
// host has one, else v1's memory hierarchy (hybrid hosts).
package memcg

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv/simjob"
)

// Group is a memory cgroup.
type Group struct {
	dir    string
	parent string // removed with it; "" if none was made
	v2     bool
}

// Create makes a cgroup named name with a memory limit of limit bytes.
func Create(name string, limit int64) (*Group, error) {
	if mnt, err := simjob.Cgroup2Mount(); err == nil {
		if c, err := os.ReadFile(filepath.Join(mnt, "cgroup.controllers")); err == nil && hasWord(c, "memory") {
			// v2: a parent with the memory controller enabled for its
			// children, and the group itself under it.
			parent := filepath.Join(mnt, name+".slice")
			dir := filepath.Join(parent, "limited")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("memcg: %w", err)
			}
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
				return nil, fmt.Errorf("memcg: enable memory controller: %w", err)
			}
			g := &Group{dir: dir, parent: parent, v2: true}
			return g, g.write("memory.max", strconv.FormatInt(limit, 10))
		}
	}
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		return nil, errors.New("memcg: no cgroup v2 memory controller and no v1 memory hierarchy")
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("memcg: %w", err)
	}
	g := &Group{dir: dir}
	return g, g.write("memory.limit_in_bytes", strconv.FormatInt(limit, 10))
}

func (g *Group) write(name, value string) error {
	if err := os.WriteFile(filepath.Join(g.dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("memcg: %s: %w", name, err)
	}
	return nil
}

// Procs is the file a process writes its pid into to join the group.
func (g *Group) Procs() string { return filepath.Join(g.dir, "cgroup.procs") }

// Wrap returns the argv that runs argv inside the group from its first
// instruction: a shell joins it, then execs the command.
func (g *Group) Wrap(argv ...string) []string {
	return append([]string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, g.Procs()}, argv...)
}

// OOMKills is how many processes of the group the OOM killer killed.
func (g *Group) OOMKills() (int, error) {
	name := "memory.oom_control" // v1: "oom_kill N" since Linux 4.13
	if g.v2 {
		name = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(g.dir, name))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "oom_kill" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("memcg: no oom_kill in %s", name)
}

// Peak is the most memory the group used (page cache included).
func (g *Group) Peak() (int64, error) {
	name := "memory.max_usage_in_bytes"
	if g.v2 {
		name = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(g.dir, name))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Remove deletes the group; its processes must have exited.
func (g *Group) Remove() error {
	var err error
	for _, d := range []string{g.dir, g.parent} {
		if d == "" {
			continue
		}
		for i := 0; i < 100; i++ {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond) // a dead task's cgroup is freed lazily
		}
	}
	return err
}

func hasWord(b []byte, w string) bool {
	for _, f := range strings.Fields(string(b)) {
		if f == w {
			return true
		}
	}
	return false
}
