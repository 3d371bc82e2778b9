package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/slurm"
	"github.com/slurmscope/slurmscope/agent/users"
	"github.com/slurmscope/slurmscope/internal/printable"
	"github.com/slurmscope/slurmscope/schema"
)

// attrFlags are the flags every command that attributes processes shares.
type attrFlags struct {
	procRoot   string
	cgroupRoot string
	v2Parents  string
	v1Parents  string
	passwd     string
	nodeName   string
	slurmctld  bool
	exitGrace  time.Duration // set by run: exited processes outlive their last drain
	// ctldWait is how long a refresh waits for slurmctld; jobs, which
	// prints once, waits for the answer.
	ctldWait time.Duration
	// ranks is set by run: each job process's environment is read for its
	// rank (--rank-labels).
	ranks   bool
	cgroups *cgroup.Tree
	log     *slog.Logger // set by run: attribution's debug lines
}

func (a *attrFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.procRoot, "proc-root", "/proc", "root of the proc filesystem")
	fs.StringVar(&a.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the cgroup filesystems are mounted (v2 there or in unified/, v1 controllers below)")
	fs.StringVar(&a.v2Parents, "slurm-cgroup-v2-parent", "/system.slice",
		"comma-separated cgroups slurmd's slurmstepd.scope may sit in (cgroup.conf CgroupSlice under the init cgroup); a look-alike elsewhere is in no job")
	fs.StringVar(&a.v1Parents, "slurm-cgroup-v1-parent", "/", "comma-separated cgroups the v1 slurm (or slurm_<node>) directory may sit in, per controller")
	fs.StringVar(&a.passwd, "passwd", "", "passwd-format file to resolve uids with, instead of the system user database")
	fs.StringVar(&a.nodeName, "node-name", "", "SLURM node name of this agent (default: short hostname); with several slurmd on one host, only this node's jobs are attributed")
	fs.BoolVar(&a.slurmctld, "slurmctld", false, "also ask slurmctld (squeue --json, scontrol) for job name, account and partition")
}

func (a *attrFlags) resolver() (*attribution.Resolver, error) {
	layout, err := a.layout()
	if err != nil {
		return nil, err
	}
	o := attribution.Options{Proc: procfs.New(a.procRoot), NodeName: a.nodeName, HostName: a.nodeName, ExitGrace: a.exitGrace,
		ControllerWait: a.ctldWait, Layout: &layout, Cgroups: a.tree(), Log: a.log, Ranks: a.ranks}
	if o.HostName == "" {
		o.HostName = shortHostname()
	}
	if a.passwd != "" {
		p, _, err := users.LoadPasswd(a.passwd)
		if err != nil {
			return nil, fmt.Errorf("--passwd: %w", err)
		}
		o.Users = p
	}
	if a.slurmctld {
		o.Controller = &slurm.Commands{}
	}
	return attribution.New(o), nil
}

// cgroupOwner is the uid Slurm's cgroup directories must have: root.
// Tests of fixture trees, made by whoever runs them, set their own.
var cgroupOwner = 0

// tree is the node's cgroup filesystems, as --cgroup-root says.
func (a *attrFlags) tree() *cgroup.Tree {
	if a.cgroups == nil {
		a.cgroups = &cgroup.Tree{Root: a.cgroupRoot, Owner: cgroupOwner}
	}
	return a.cgroups
}

// layout is where the flags say slurmd makes its cgroups.
func (a *attrFlags) layout() (cgroup.Layout, error) {
	var l cgroup.Layout
	for _, f := range []struct {
		flag, v string
		dst     *[]string
	}{{"--slurm-cgroup-v2-parent", a.v2Parents, &l.V2Parents}, {"--slurm-cgroup-v1-parent", a.v1Parents, &l.V1Parents}} {
		for p := range strings.SplitSeq(f.v, ",") {
			p = strings.TrimSpace(p)
			if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.Contains("/"+p+"/", "/../") {
				return l, fmt.Errorf("%s %q: want absolute cgroup paths such as /system.slice", f.flag, p)
			}
			*f.dst = append(*f.dst, p)
		}
	}
	return l, nil
}

func jobsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	var af attrFlags
	af.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per process")
	all := fs.Bool("all", false, "also list processes that are in no job")
	if rc, done := parseArgs(fs, args, stderr); done {
		return rc
	}
	af.ctldWait = time.Minute // past the lookup's own timeout
	r, err := af.resolver()
	if err != nil {
		fmt.Fprintf(stderr, "jobs: %v\n", err)
		return 1
	}
	procs, err := r.Scan()
	if err != nil {
		fmt.Fprintf(stderr, "jobs: %v\n", err)
		return 1
	}
	var shown []attribution.Process
	for _, p := range procs {
		if p.Foreign {
			continue // another slurmd's process on this host
		}
		if p.InJob() || *all {
			shown = append(shown, p)
		}
	}
	if *asJSON {
		err = writeJSON(stdout, shown)
	} else {
		err = writeTable(stdout, shown)
	}
	if err != nil {
		fmt.Fprintf(stderr, "jobs: %v\n", err)
		return 1
	}
	if st := r.Stats(); st.ControllerErrs > 0 {
		fmt.Fprintf(stderr, "jobs: %d slurmctld lookups failed, job metadata came from the tasks' environment; last: %s\n", st.ControllerErrs, printable.String(fmt.Sprint(r.LastError()), ""))
	} else if refused := st.Refused[cgroup.ReasonOutside] + st.Refused[cgroup.ReasonOwner] + st.Refused[cgroup.ReasonUnverified]; st.MalformedCgroup > 0 || st.Unreadable > 0 || refused > 0 {
		fmt.Fprintf(stderr, "jobs: %d processes with malformed Slurm cgroup paths, %d in look-alikes of Slurm's tree and %d unreadable files were left out of jobs; last: %s\n",
			st.MalformedCgroup, refused, st.Unreadable, printable.String(fmt.Sprint(r.LastError()), ""))
	}
	return 0
}

// Fields returns a process's attributes by dotted name, leaving out those
// with no known value.
func Fields(p attribution.Process) [][2]string {
	var f [][2]string
	for _, a := range schema.All {
		if v := p.Value(a); v != "" {
			f = append(f, [2]string{a.Name, v})
		}
	}
	return f
}

// writeJSON prints one object per line, "pid" first and then the schema's
// order, so the output diffs well. encoding/json escapes control
// characters; values are already valid UTF-8.
func writeJSON(w io.Writer, procs []attribution.Process) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, p := range procs {
		buf.Reset()
		buf.WriteString(`{"pid":`)
		buf.WriteString(strconv.Itoa(p.PID))
		for _, kv := range Fields(p) {
			buf.WriteByte(',')
			if err := enc.Encode(kv[0]); err != nil {
				return err
			}
			buf.Truncate(buf.Len() - 1) // Encode's newline
			buf.WriteByte(':')
			if err := enc.Encode(kv[1]); err != nil {
				return err
			}
			buf.Truncate(buf.Len() - 1)
		}
		buf.WriteString("}\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func writeTable(w io.Writer, procs []attribution.Process) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tHOST\tJOBID\tSTEP\tUSER\tACCOUNT\tPARTITION\tCOMMAND\tJOB NAME")
	for _, p := range procs {
		var id, step, user, acct, part, name string
		if j := p.Job; j != nil {
			id, step, user, acct, part, name = j.ID, p.Step, j.User, j.Value(schema.JobAccount), j.Value(schema.JobPartition), j.Name
			if p.Stepd {
				step += " (slurmstepd)"
			}
		}
		cells := []string{strconv.Itoa(p.PID), p.Host, id, step, user, acct, part, p.Comm, name}
		for i, c := range cells {
			if i > 0 {
				tw.Write([]byte{'\t'})
			}
			tw.Write([]byte(printable.String(c, "-")))
		}
		tw.Write([]byte{'\n'})
	}
	return tw.Flush()
}
