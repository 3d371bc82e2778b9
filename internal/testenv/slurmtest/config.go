package slurmtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Partition is the one partition every node is in.
const Partition = "debug"

// writeConfig writes slurm.conf and cgroup.conf with free TCP ports.
func (c *Cluster) writeConfig() error {
	ports, err := freePorts(1 + len(c.opts.Nodes))
	if err != nil {
		return err
	}
	wd := c.opts.WorkDir
	p := func(parts ...string) string { return filepath.Join(append([]string{wd}, parts...)...) }
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by slurmscope internal/testenv/slurmtest for a throwaway test cluster.")
	w("ClusterName=slurmscope-e2e")
	w("SlurmctldHost=%s(127.0.0.1)", c.host)
	w("SlurmctldPort=%d", ports[0])
	w("SlurmUser=root")
	w("SlurmdUser=root")
	w("AuthType=auth/munge")
	w("CredType=cred/munge")
	// Our own munged: clients, daemons and credentials all use its socket.
	w("AuthInfo=socket=%s", c.mungeSocket)
	w("StateSaveLocation=%s", p("state"))
	w("SlurmdSpoolDir=%s", p("spool", "%n"))
	w("SlurmctldPidFile=%s", p("run", "slurmctld.pid"))
	w("SlurmdPidFile=%s", p("run", "slurmd-%n.pid"))
	w("SlurmctldLogFile=%s", p("log", "slurmctld.log"))
	w("SlurmdLogFile=%s", p("log", "slurmd-%n.log"))
	w("SlurmctldDebug=info")
	w("SlurmdDebug=debug")
	w("ProctrackType=proctrack/cgroup")
	w("TaskPlugin=task/cgroup")
	w("SelectType=select/cons_tres")
	if c.opts.Constrain {
		// Memory is a consumable resource only with CR_Core_Memory: then
		// a job's --mem becomes its cgroup's limit.
		w("SelectTypeParameters=CR_Core_Memory")
	} else {
		w("SelectTypeParameters=CR_Core")
	}
	// Contain creates the extern step, which real clusters mostly have.
	w("PrologFlags=Contain")
	// Several slurmds share this host's CPUs; take the configured counts.
	w("SlurmdParameters=config_overrides")
	if c.opts.Constrain {
		// jobacct_gather/cgroup is what makes Slurm create the v1
		// cpuacct cgroups (a job's CPU time); production clusters run it.
		w("JobAcctGatherType=jobacct_gather/cgroup")
	} else {
		w("JobAcctGatherType=jobacct_gather/none")
	}
	w("AccountingStorageType=accounting_storage/none")
	w("JobCompType=jobcomp/none")
	w("MpiDefault=none")
	w("ReturnToService=2")
	w("SchedulerType=sched/backfill")
	w("InactiveLimit=0")
	w("KillWait=2")
	w("MinJobAge=30")
	if len(c.opts.GRES) > 0 {
		w("GresTypes=gpu")
	}
	if c.opts.TaskProlog != "" {
		path := p("run", "taskprolog.sh")
		if err := os.WriteFile(path, []byte(c.opts.TaskProlog), 0o755); err != nil {
			return err
		}
		w("TaskProlog=%s", path)
	}
	for i, n := range c.opts.Nodes {
		w("NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=1000%s State=UNKNOWN", n, c.host, ports[1+i], c.opts.CPUs, gresCounts(c.opts.GRES, n))
	}
	w("PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP", Partition)
	if err := os.WriteFile(c.conf, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(c.conf), "gres.conf"), []byte(gresConf(c.opts.GRES)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(filepath.Dir(c.conf), "cgroup.conf"), []byte(c.cgroupConf()), 0o644)
}

// GRES is one GPU of a node in gres.conf: a whole GPU (one file, File=) or
// a MIG instance (the parent GPU's file and the instance's capability
// files, MultipleFiles=). Slurm numbers a node's records in the order
// given here: that is the index scontrol prints as IDX.
type GRES struct {
	Node  string
	Type  string // e.g. "h100", "3g.40gb"
	Files []string
}

// gresCounts is the " Gres=gpu:<type>:<n>,..." of a NodeName line.
func gresCounts(gres []GRES, node string) string {
	var types []string
	n := map[string]int{}
	for _, g := range gres {
		if g.Node != node {
			continue
		}
		if n[g.Type] == 0 {
			types = append(types, g.Type)
		}
		n[g.Type]++
	}
	if len(types) == 0 {
		return ""
	}
	var parts []string
	for _, t := range types {
		parts = append(parts, fmt.Sprintf("gpu:%s:%d", t, n[t]))
	}
	return " Gres=" + strings.Join(parts, ",")
}

func gresConf(gres []GRES) string {
	var b strings.Builder
	b.WriteString("# Written by slurmscope internal/testenv/slurmtest.\n")
	for _, g := range gres {
		key := "File"
		if len(g.Files) > 1 {
			key = "MultipleFiles"
		}
		fmt.Fprintf(&b, "NodeName=%s Name=gpu Type=%s %s=%s\n", g.Node, g.Type, key, strings.Join(g.Files, ","))
	}
	return b.String()
}

func (c *Cluster) cgroupConf() string {
	// No memory limits unless asked for, which a small CI VM could trip
	// over.
	constrain := "no"
	if c.opts.Constrain {
		constrain = "yes"
	}
	if c.opts.Mode == V1 {
		// ConstrainDevices gives the devices controller per-task
		// directories (task_<n>).
		return "# Written by slurmscope internal/testenv/slurmtest.\n" +
			"CgroupPlugin=cgroup/v1\n" +
			"CgroupAutomount=no\n" +
			"CgroupMountpoint=" + c.opts.CgroupRoot + "\n" +
			"ConstrainCores=" + constrain + "\n" +
			"ConstrainRAMSpace=" + constrain + "\n" +
			"ConstrainDevices=yes\n"
	}
	// No systemd here, so slurmd makes its scope itself (IgnoreSystemd).
	// Without ConstrainDevices the v2 plugin, finding no controllers to
	// enable on a hybrid host, leaves every task in task_special.
	return "# Written by slurmscope internal/testenv/slurmtest.\n" +
		"CgroupPlugin=cgroup/v2\n" +
		"CgroupAutomount=no\n" +
		"CgroupMountpoint=" + c.cg2Mount + "\n" +
		"IgnoreSystemd=yes\n" +
		"ConstrainCores=" + constrain + "\n" +
		"ConstrainRAMSpace=" + constrain + "\n" +
		"ConstrainDevices=yes\n"
}

// prepareV2 builds the shim when the host is hybrid (returning its path for
// LD_PRELOAD, or "" on a pure v2 host) and creates system.slice, which
// systemd would otherwise own and slurmd (IgnoreSystemd) expects to exist.
func (c *Cluster) prepareV2(ctx context.Context) (string, error) {
	slice := filepath.Join(c.cg2Mount, "system.slice")
	if _, err := os.Stat(slice); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(slice, 0o755); err != nil {
			return "", fmt.Errorf("slurmtest: creating %s: %w", slice, err)
		}
		c.madeSlice = true
	}
	if len(c.v1Mounts) == 0 {
		return "", nil
	}
	src := c.opts.ShimSource
	if src == "" {
		_, file, _, ok := runtime.Caller(0)
		if !ok {
			return "", errors.New("slurmtest: cannot locate internal/testenv/cgv2shim; set Options.ShimSource")
		}
		src = filepath.Join(filepath.Dir(file), "..", "cgv2shim", "cgv2shim.c")
	}
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("slurmtest: cgroup v2 on a hybrid host needs the shim source: %w", err)
	}
	out := filepath.Join(c.opts.WorkDir, "run", "cgv2shim.so")
	cmd := exec.CommandContext(ctx, "cc", "-shared", "-fPIC", "-O2", "-Wall", "-o", out, src, "-ldl")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("slurmtest: building %s: %v: %s", src, err, b)
	}
	c.logf("hybrid cgroup host: slurmd runs with LD_PRELOAD=%s", out)
	return out, nil
}

// freePorts returns n distinct TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
