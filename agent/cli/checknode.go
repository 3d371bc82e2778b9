package cli

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/grafana/pyroscope/api/gen/proto/go/push/v1/pushv1connect"
	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/gpu"
	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/internal/printable"
	"github.com/slurmscope/slurmscope/schema"
)

func init() {
	extraCommands["check"] = checkCmd
	summaries["check"] = "report whether this node has what run needs (kernel, BTF, privileges, kallsyms, cgroups, NVML, backends); takes run's flags"
}

// nodeChecks are what check reports on, in order, one line each. A new
// check is one more line here: a function of the parsed flags that says
// what it found.
var nodeChecks = []nodeCheck{
	{"flags", checkRunFlags},
	{"kernel", checkKernel},
	{"btf", checkBTF},
	{"privileges", checkPrivileges},
	{"perf_event_paranoid", checkParanoid},
	{"kallsyms", checkKallsyms},
	{"cgroup", checkCgroupMode},
	{"slurm-cgroup", checkSlurmCgroup},
	{"nvml", checkNVML},
	{"gpu-inject-lib", checkInjectLib},
	{"metrics-addr", checkMetricsAddr},
	{"pyroscope", checkBackend("pyroscope", pushv1connect.PusherServicePushProcedure,
		"--pyroscope-url is the server's base URL (with a gateway's path prefix, if any); the agent POSTs to "+pushv1connect.PusherServicePushProcedure+" below it")},
	{"prometheus-remote-write", checkBackend("prometheus-remote-write", "",
		"--prometheus-remote-write-url is the whole endpoint (Prometheus: /api/v1/write, which needs --web.enable-remote-write-receiver; Mimir: /api/v1/push)")},
}

// nodeCheck is one line of check's report.
type nodeCheck struct {
	name string
	run  func(*checkEnv) checkResult
}

type checkStatus string

const (
	statusOK   checkStatus = "ok"
	statusWarn checkStatus = "warn" // the agent runs, with less
	statusFail checkStatus = "fail" // the agent cannot do its job
	statusSkip checkStatus = "skip" // not asked for, or nothing to check
)

// checkResult is what one check found; Hint says what to do about anything
// not ok.
type checkResult struct {
	Status checkStatus `json:"status"`
	Check  string      `json:"check"`
	Found  string      `json:"found"`
	Hint   string      `json:"hint,omitempty"`
}

func okf(format string, a ...any) checkResult {
	return checkResult{Status: statusOK, Found: fmt.Sprintf(format, a...)}
}

func warnHint(found, hint string) checkResult {
	return checkResult{Status: statusWarn, Found: found, Hint: hint}
}

func failHint(found, hint string) checkResult {
	return checkResult{Status: statusFail, Found: found, Hint: hint}
}

func skipf(format string, a ...any) checkResult {
	return checkResult{Status: statusSkip, Found: fmt.Sprintf(format, a...)}
}

// checkEnv is what the checks read: run's flags, parsed, and the
// filesystem roots they name.
type checkEnv struct {
	f  *runFlags
	fs *flag.FlagSet // run's flags by name, for the kinds' own
	// arch is the agent's GOARCH.
	arch string
	// timeout bounds each network check.
	timeout time.Duration
	// openNVML loads NVML as the agent does, and closes it.
	openNVML func(library string) error
}

// openNVML is how run's GPU collector loads NVML (gpu.New checks every
// entry point a poll may call), closed at once.
func openNVML(library string) error {
	c, err := gpu.New(gpu.Options{LibraryPath: library, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	return c.Close()
}

func checkCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f runFlags
	f.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per check")
	timeout := fs.Duration("check-timeout", 5*time.Second, "bound of each network check (a backend's request, --metrics-addr)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: slurmscope-agent check [--json] [--check-timeout 5s] [run's flags]

Reports whether this node has what 'slurmscope-agent run' needs with these
flags, one line per check: ok, warn (the agent runs, with less), fail (it
cannot do its job) or skip, what was found, and a hint. Run it as root, with
the unit's flags. Exit status: 0 if no check failed, 1 if one did, 2 for bad
usage.

`)
		fs.PrintDefaults()
	}
	if rc, done := parseArgs(fs, args, stderr); done {
		return rc
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "check: --check-timeout %v: must be positive\n", *timeout)
		return 2
	}
	e := &checkEnv{f: &f, fs: fs, arch: runtime.GOARCH, timeout: *timeout, openNVML: openNVML}
	results := runChecks(e, nodeChecks)
	var err error
	if *asJSON {
		err = writeCheckJSON(stdout, results)
	} else {
		err = writeCheckText(stdout, results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "check: %v\n", err)
		return 1
	}
	for _, r := range results {
		if r.Status == statusFail {
			return 1
		}
	}
	return 0
}

// runChecks runs every check; one that panics fails, and the rest still
// run.
func runChecks(e *checkEnv, checks []nodeCheck) []checkResult {
	out := make([]checkResult, 0, len(checks))
	for _, c := range checks {
		out = append(out, runCheck(e, c))
	}
	return out
}

func runCheck(e *checkEnv, c nodeCheck) (r checkResult) {
	defer func() {
		if p := recover(); p != nil {
			r = failHint(fmt.Sprintf("the check panicked: %v", p), "a bug in check: please report it")
		}
		r.Check = c.name
	}()
	return c.run(e)
}

func writeCheckText(w io.Writer, results []checkResult) error {
	for _, r := range results {
		line := fmt.Sprintf("%-4s  %-23s  %s", r.Status, r.Check, printable.String(r.Found, "-"))
		if r.Hint != "" {
			line += "; hint: " + printable.String(r.Hint, "")
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

func writeCheckJSON(w io.Writer, results []checkResult) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, r := range results {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// flag is the value of one of run's flags.
func (e *checkEnv) flag(name string) string {
	if fl := e.fs.Lookup(name); fl != nil {
		return fl.Value.String()
	}
	return ""
}

func (e *checkEnv) proc(elem ...string) string {
	return filepath.Join(append([]string{e.f.attr.procRoot}, elem...)...)
}

func (e *checkEnv) sys(elem ...string) string {
	return filepath.Join(append([]string{e.f.sysRoot}, elem...)...)
}

// cpuProfiling, gpuKernels and offCPU say which eBPF sources run would
// load.
func (e *checkEnv) cpuProfiling() bool { return e.flag("cpu-profiling") == "true" }
func (e *checkEnv) gpuKernels() bool   { return e.flag("gpu-inject-lib") != "" }
func (e *checkEnv) offCPU() bool       { return e.flag("offcpu-profiling") == "true" }
func (e *checkEnv) ebpf() bool         { return e.cpuProfiling() || e.gpuKernels() || e.offCPU() }

// metricsServer is run's /metrics service, whose flags are its own.
func (e *checkEnv) metricsServer() *metricsServer {
	for _, k := range e.f.services {
		if m, ok := k.(*metricsServer); ok {
			return m
		}
	}
	return nil
}

// checkRunFlags runs run's own validation of its flags, but for binding
// --metrics-addr: a running agent holds it (metrics-addr says so).
func checkRunFlags(e *checkEnv) checkResult {
	err := func() error {
		if m := e.metricsServer(); m != nil {
			addr := m.addr
			m.addr = ""
			defer func() { m.addr = addr }()
		}
		if err := e.f.check(); err != nil {
			return err
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(e.f.logLevel)); err != nil {
			return fmt.Errorf("--log-level: %w", err)
		}
		_, err := e.f.attr.layout()
		return err
	}()
	if err != nil {
		return failHint("run refuses them: "+strings.Join(strings.Fields(err.Error()), " "), "run would exit 2 at start: fix the flag it names")
	}
	return okf("run accepts them")
}

// kernelVersion is a kernel release's major and minor number.
type kernelVersion struct{ major, minor int }

func (v kernelVersion) atLeast(major, minor int) bool {
	return v.major > major || v.major == major && v.minor >= minor
}

func (v kernelVersion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// parseKernelRelease reads "6.8.0-45-generic" as 6.8.
func parseKernelRelease(rel string) (kernelVersion, bool) {
	maj, rest, ok := strings.Cut(rel, ".")
	if !ok {
		return kernelVersion{}, false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil || end == 0 {
		return kernelVersion{}, false
	}
	return kernelVersion{a, b}, true
}

// kernel is the release the kernel reports in /proc.
func (e *checkEnv) kernel() (string, kernelVersion, error) {
	b, err := os.ReadFile(e.proc("sys", "kernel", "osrelease"))
	if err != nil {
		return "", kernelVersion{}, err
	}
	rel := strings.TrimSpace(string(b))
	v, ok := parseKernelRelease(rel)
	if !ok {
		return rel, v, fmt.Errorf("kernel release %q: not major.minor", rel)
	}
	return rel, v, nil
}

const (
	hintKernel58 = "Linux 5.8 or later with BTF and perf events: the stack capture's and the GPU kernel tracer's BPF ring buffers are new in 5.8; " +
		"5.5 is enough for CPU profiles with --unwind=fp --python-frames=false and without --gpu-inject-lib"
	hintBPFLoop = "5.17 or later for complete user stacks of code built without frame pointers: the .eh_frame unwinder walks in bpf_loop (5.17); " +
		"before it the agent takes user stacks by frame pointers, which keep only the leaf of code built without them"
)

func checkKernel(e *checkEnv) checkResult {
	rel, v, err := e.kernel()
	if err != nil {
		return warnHint("unknown kernel release: "+err.Error(), "--proc-root must name the host's /proc")
	}
	found := "Linux " + rel
	if !e.ebpf() {
		return okf("%s; no eBPF source on (--cpu-profiling=false, --offcpu-profiling=false, no --gpu-inject-lib)", found)
	}
	fp := e.f.unwind == "fp"
	need := kernelVersion{5, 8}
	if fp && !e.gpuKernels() && len(e.f.interps.enabled()) == 0 {
		need = kernelVersion{5, 5}
	}
	switch {
	case !v.atLeast(need.major, need.minor):
		return failHint(fmt.Sprintf("%s: the agent needs %s or later with these flags", found, need), hintKernel58)
	case e.offCPU() && !v.atLeast(5, 15) && (!e.cpuProfiling() || fp || v.atLeast(5, 17)):
		return warnHint(found+": no off-CPU profiles before Linux 5.15 (task storage in tracing programs, bpf_task_pt_regs); the agent runs without them",
			"--offcpu-profiling=false says so")
	case !e.cpuProfiling() || fp:
		return okf("%s", found)
	case e.arch != "amd64":
		return warnHint(fmt.Sprintf("%s on %s: user stacks by frame pointers (the .eh_frame unwinder is x86-64 only)", found, e.arch),
			"code built without frame pointers keeps only its leaf; Go and many distribution packages have them")
	case !v.atLeast(5, 17):
		return warnHint(found+": no bpf_loop, user stacks by frame pointers ("+schema.AgentUnwindMode.Name+`{mode="frame_pointer",reason="no_bpf_loop"})`, hintBPFLoop)
	}
	return okf("%s: BPF ring buffers, bpf_loop (.eh_frame unwinding)", found)
}

func checkBTF(e *checkEnv) checkResult {
	p := e.sys("kernel", "btf", "vmlinux")
	st, err := os.Stat(p)
	switch {
	case err == nil && st.Mode().IsRegular():
		return okf("%s present (%d bytes)", p, st.Size())
	case !e.ebpf():
		return skipf("no eBPF source on (--cpu-profiling=false, --offcpu-profiling=false, no --gpu-inject-lib)")
	case err == nil:
		return failHint(p+" is not a regular file", "--sys-root must name the host's /sys")
	case errors.Is(err, os.ErrNotExist):
		return failHint(p+" missing: the agent cannot load its BPF programs without the kernel's BTF",
			hintKernel58+"; a kernel built with CONFIG_DEBUG_INFO_BTF=y has it")
	}
	return failHint(err.Error(), "--sys-root must name the host's /sys")
}

// procStatus is what the agent's own /proc/self/status says of its
// privileges.
type procStatus struct {
	euid int
	caps uint64 // CapEff
}

func (s procStatus) has(c int) bool {
	return c >= 0 && c < 64 && s.caps&(1<<uint(c)) != 0 // #nosec G115 -- c is checked to be 0-63 first
}

func (e *checkEnv) self() (procStatus, error) {
	st := procStatus{euid: -1}
	b, err := os.ReadFile(e.proc("self", "status"))
	if err != nil {
		return st, err
	}
	var uid, caps bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) >= 2:
			if st.euid, err = strconv.Atoi(f[1]); err != nil {
				return st, fmt.Errorf("Uid: %w", err)
			}
			uid = true
		case k == "CapEff" && len(f) == 1:
			if st.caps, err = strconv.ParseUint(f[0], 16, 64); err != nil {
				return st, fmt.Errorf("CapEff: %w", err)
			}
			caps = true
		}
	}
	if !uid || !caps {
		return st, errors.New("no Uid or CapEff line")
	}
	return st, nil
}

// agentCaps are the capabilities the unit grants the agent, and what each
// is for (README, "The systemd unit").
// before is the kernel from which a capability is no longer needed (zero:
// always needed).
var agentCaps = []struct {
	bit    int
	name   string
	why    string
	before kernelVersion
}{
	{unix.CAP_BPF, "CAP_BPF", "the BPF programs", kernelVersion{}},
	{unix.CAP_PERFMON, "CAP_PERFMON", "the BPF programs", kernelVersion{}},
	{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "the BPF programs (kernels before 5.8)", kernelVersion{5, 8}},
	{unix.CAP_SYS_PTRACE, "CAP_SYS_PTRACE", "reading jobs' /proc and files", kernelVersion{}},
	{unix.CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH", "reading jobs' /proc and files", kernelVersion{}},
	{unix.CAP_SYSLOG, "CAP_SYSLOG", "kernel symbols (without it /proc/kallsyms reads as zeros and every kernel frame is [kernel])", kernelVersion{}},
	{unix.CAP_SYS_NICE, "CAP_SYS_NICE", "running its table loaders at a lower priority", kernelVersion{}},
	{unix.CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE", "locked BPF memory (kernels before 5.11)", kernelVersion{5, 11}},
	{unix.CAP_IPC_LOCK, "CAP_IPC_LOCK", "locked BPF memory (kernels before 5.11)", kernelVersion{5, 11}},
}

func checkPrivileges(e *checkEnv) checkResult {
	st, err := e.self()
	if err != nil {
		return failHint("reading the agent's own status: "+err.Error(), "--proc-root must name the host's /proc")
	}
	_, kv, kerr := e.kernel()
	var missing, required, why []string
	for _, c := range agentCaps {
		if c.before.major > 0 && kerr == nil && kv.atLeast(c.before.major, c.before.minor) {
			continue // this kernel does without it
		}
		if !st.has(c.bit) {
			missing = append(missing, c.name)
			why = append(why, c.name+" for "+c.why)
		}
	}
	if e.ebpf() {
		bpf := st.has(unix.CAP_BPF) && st.has(unix.CAP_PERFMON)
		if kerr == nil && !kv.atLeast(5, 8) {
			bpf = false // CAP_BPF and CAP_PERFMON are new in 5.8
		}
		if !bpf && !st.has(unix.CAP_SYS_ADMIN) {
			required = append(required, "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)")
		}
	}
	for _, c := range []int{unix.CAP_SYS_PTRACE, unix.CAP_DAC_READ_SEARCH} {
		if !st.has(c) {
			required = append(required, capName(c))
		}
	}
	found := fmt.Sprintf("uid %d", st.euid)
	if len(missing) == 0 {
		found += ", with every capability the agent uses on this kernel"
	} else {
		found += ", without " + strings.Join(missing, ", ")
	}
	hint := "the agent uses " + strings.Join(why, "; ")
	switch {
	case st.euid != 0:
		return failHint(found, "the agent runs as root (the unit does): run check as root, e.g. sudo slurmscope-agent check")
	case len(required) > 0:
		return failHint(found+": it lacks "+strings.Join(required, ", "),
			hint+"; the unit's CapabilityBoundingSet grants them")
	case len(missing) > 0:
		return warnHint(found, hint)
	}
	return okf("%s", found)
}

func capName(bit int) string {
	for _, c := range agentCaps {
		if c.bit == bit {
			return c.name
		}
	}
	return "capability " + strconv.Itoa(bit)
}

// readInt reads a file holding one integer (a sysctl).
func readInt(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return v, nil
}

func checkParanoid(e *checkEnv) checkResult {
	if !e.ebpf() {
		return skipf("no eBPF source on (--cpu-profiling=false, --offcpu-profiling=false, no --gpu-inject-lib)")
	}
	p := e.proc("sys", "kernel", "perf_event_paranoid")
	v, err := readInt(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return failHint(p+" missing: a kernel without perf events", hintKernel58)
	case err != nil:
		return warnHint("unreadable: "+err.Error(), "--proc-root must name the host's /proc")
	}
	st, err := e.self()
	if err != nil {
		return warnHint(fmt.Sprintf("%d; the agent's capabilities unknown: %v", v, err), "--proc-root must name the host's /proc")
	}
	switch {
	case v > 2 && st.has(unix.CAP_SYS_ADMIN):
		return okf("%d (a distribution's level refusing perf events to the unprivileged); CAP_SYS_ADMIN passes it", v)
	case v > 2 && st.has(unix.CAP_PERFMON):
		return warnHint(fmt.Sprintf("%d (a distribution's level refusing perf events to the unprivileged), with CAP_PERFMON but not CAP_SYS_ADMIN", v),
			"some kernels' patch for this level asks CAP_SYS_ADMIN: keep it in the unit's capabilities, or set kernel.perf_event_paranoid=2")
	case st.has(unix.CAP_PERFMON) || st.has(unix.CAP_SYS_ADMIN):
		return okf("%d; CAP_PERFMON or CAP_SYS_ADMIN passes it", v)
	}
	return failHint(fmt.Sprintf("%d, without CAP_PERFMON or CAP_SYS_ADMIN: no perf events on every CPU", v),
		"run the agent as root with the unit's capabilities (CAP_PERFMON, CAP_SYS_ADMIN)")
}

func checkKallsyms(e *checkEnv) checkResult {
	if !e.ebpf() {
		return skipf("no eBPF source on: no kernel frames to name")
	}
	p := e.proc("kallsyms")
	hidden, err := symbolize.KallsymsHidden(procfs.New(e.f.attr.procRoot))
	if err != nil {
		return warnHint("kernel symbols are unreadable: "+err.Error(), "kernel frames will be [kernel]")
	}
	if !hidden {
		return okf("%s shows addresses: kernel frames are named", p)
	}
	found := p + " reads as zeros: kernel frames will be [kernel]"
	kptr, kerr := readInt(e.proc("sys", "kernel", "kptr_restrict"))
	st, serr := e.self()
	switch {
	case kerr == nil && kptr >= 2:
		return warnHint(found, "kernel.kptr_restrict=2 hides them even from CAP_SYSLOG: set it to 1 (sysctl kernel.kptr_restrict=1)")
	case serr == nil && !st.has(unix.CAP_SYSLOG):
		return warnHint(found, "the agent needs CAP_SYSLOG to read kernel symbols (the unit grants it; ProtectKernelLogs would drop it)")
	}
	return warnHint(found, "kptr_restrict or perf_event_paranoid hide them from a reader without CAP_SYSLOG")
}

// v1Hierarchies are the cgroup v1 hierarchies mounted under root: its
// directories that are cgroups, but unified/ (a hybrid host's v2).
func v1Hierarchies(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range entries {
		if !d.IsDir() || d.Name() == "unified" {
			continue // a link (cpu -> cpu,cpuacct) names a hierarchy twice
		}
		if exists(filepath.Join(root, d.Name(), "cgroup.procs")) {
			out = append(out, d.Name())
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// cgroupMode is "v2", "hybrid" or "v1" ("" for none), and the v1
// hierarchies.
func (e *checkEnv) cgroupMode() (string, []string) {
	root := e.f.attr.cgroupRoot
	switch {
	case exists(filepath.Join(root, "cgroup.controllers")):
		return "v2", nil
	case exists(filepath.Join(root, "unified", "cgroup.controllers")):
		return "hybrid", v1Hierarchies(root)
	}
	if v1 := v1Hierarchies(root); len(v1) > 0 {
		return "v1", v1
	}
	return "", nil
}

func checkCgroupMode(e *checkEnv) checkResult {
	root := e.f.attr.cgroupRoot
	mode, v1 := e.cgroupMode()
	switch mode {
	case "v2":
		return okf("v2 (unified) at %s", root)
	case "hybrid":
		return okf("hybrid: v2 at %s, v1 %s", filepath.Join(root, "unified"), strings.Join(v1, ", "))
	case "v1":
		return okf("v1 at %s: %s", root, strings.Join(v1, ", "))
	}
	return failHint("no cgroup filesystem under "+root,
		"--cgroup-root must name where the cgroup filesystems are mounted (v2 there or in unified/, v1 controllers below)")
}

// slurmScope recognises the directory slurmd makes for its steps on v2
// (slurmstepd.scope, <node>_slurmstepd.scope) and v1 (slurm, slurm_<node>),
// and the node it names ("" for a host's only slurmd).
func slurmScope(name string, version int) (string, bool) {
	if version == 2 {
		if name == "slurmstepd.scope" {
			return "", true
		}
		node, ok := strings.CutSuffix(name, "_slurmstepd.scope")
		return node, ok && node != ""
	}
	if name == "slurm" {
		return "", true
	}
	node, ok := strings.CutPrefix(name, "slurm_")
	return node, ok && node != ""
}

// checkSlurmCgroup looks for Slurm's tree where the layout flags say slurmd
// makes it, and checks it as attribution does (root's directories).
func checkSlurmCgroup(e *checkEnv) checkResult {
	layout, err := e.f.attr.layout()
	if err != nil {
		return failHint(err.Error(), "run stops at start: fix the flag it names")
	}
	tree := e.f.attr.tree()
	node := e.f.attr.nodeName
	if node == "" {
		node = shortHostname()
	}
	var found, refused, foreign []string
	// look lists the Slurm directories in parent (a cgroup path) of the
	// hierarchy mounted at mnt.
	look := func(mnt, parent string, version int, hier string) {
		entries, err := os.ReadDir(filepath.Join(mnt, filepath.FromSlash(parent)))
		if err != nil {
			return
		}
		for _, d := range entries {
			n, ok := slurmScope(d.Name(), version)
			if !ok {
				continue
			}
			p := path.Join(parent, d.Name())
			label := fmt.Sprintf("v%d %s", version, p)
			if hier != "" {
				label = fmt.Sprintf("v1 %s (%s)", p, hier)
			}
			if err := tree.Verify(cgroup.Location{Version: version, Hierarchy: hier, Path: p, Slurm: p}); err != nil {
				var r *cgroup.Refused
				if errors.As(err, &r) {
					refused = append(refused, label+": "+r.Detail)
				} else {
					refused = append(refused, label+": "+err.Error())
				}
				continue
			}
			if n != "" && n != node {
				foreign = append(foreign, label)
				continue
			}
			found = append(found, label)
		}
	}
	mode, v1 := e.cgroupMode()
	if mode == "v2" || mode == "hybrid" {
		for _, p := range layout.V2Parents {
			look(tree.V2Mount(), p, 2, "")
		}
	}
	for _, h := range v1 {
		for _, p := range layout.V1Parents {
			look(filepath.Join(e.f.attr.cgroupRoot, h), p, 1, h)
		}
	}
	layoutHint := "where cgroup.conf's CgroupSlice is not system.slice, or slurmd runs in a container, set --slurm-cgroup-v2-parent / --slurm-cgroup-v1-parent"
	switch {
	case len(found) > 0:
		return okf("%s", strings.Join(found, "; "))
	case len(refused) > 0:
		return failHint("Slurm-named directories the agent refuses: "+strings.Join(refused, "; "),
			"only Slurm's own tree counts, owned by root where slurmd makes it; a look-alike is in no job")
	case len(foreign) > 0:
		return warnHint(fmt.Sprintf("only other nodes' Slurm cgroups: %s (this agent's node: %s)", strings.Join(foreign, "; "), node),
			"--node-name must be the node's Slurm NodeName; on a host with several slurmd, run one agent per NodeName")
	case mode == "":
		return failHint("no cgroup filesystem under "+e.f.attr.cgroupRoot, "--cgroup-root")
	}
	return warnHint(fmt.Sprintf("no Slurm cgroups: no slurmstepd.scope in %s (v2), no slurm directory in %s (v1): no process will be in a job",
		strings.Join(layout.V2Parents, ","), strings.Join(layout.V1Parents, ",")),
		"is slurmd running here with ProctrackType=proctrack/cgroup and TaskPlugin=task/cgroup? "+layoutHint)
}

// gpuDeviceFiles counts the /dev/nvidia<N> files of --dev-root.
func (e *checkEnv) gpuDeviceFiles() (string, int) {
	dev := e.flag("dev-root")
	m, _ := filepath.Glob(filepath.Join(dev, "nvidia[0-9]*"))
	return dev, len(m)
}

func checkNVML(e *checkEnv) checkResult {
	if e.flag("gpu-metrics") != "true" {
		return skipf("GPU metrics off (--gpu-metrics=false)")
	}
	lib := e.flag("nvml-library")
	where := "libnvidia-ml.so.1 (the dynamic linker's search)"
	if lib != "" {
		where = lib
	}
	dev, n := e.gpuDeviceFiles()
	devices := fmt.Sprintf("%d GPU device files in %s", n, dev)
	err := e.openNVML(lib)
	switch {
	case err == nil:
		return okf("NVML loads from %s; %s", where, devices)
	case errors.Is(err, gpu.ErrNoDriver) && lib == "" && n == 0:
		why := strings.TrimPrefix(err.Error(), gpu.ErrNoDriver.Error()+": ")
		return skipf("no NVIDIA driver (%s) and no GPU device files in %s: the agent runs without GPU metrics", why, dev)
	case errors.Is(err, gpu.ErrNoDriver) && lib != "":
		return warnHint(fmt.Sprintf("NVML does not load from %s: %v; %s", lib, err, devices),
			"--nvml-library names the driver's libnvidia-ml.so.1 (e.g. /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1); the agent runs without GPU metrics")
	case errors.Is(err, gpu.ErrNoDriver):
		return warnHint(fmt.Sprintf("%s but NVML does not load: %v", devices, err),
			"set --nvml-library where the driver lives elsewhere (e.g. /usr/local/nvidia/lib64/libnvidia-ml.so.1); the agent runs without GPU metrics")
	}
	return warnHint(fmt.Sprintf("NVML from %s: %v; %s", where, err, devices), "the agent runs without GPU metrics")
}

// injectSymbols are the marker ABI of libslurmscope_inject.so
// (gpuinject/slurmscope_inject.h) the GPU kernel tracer attaches to.
var injectSymbols = []string{"slurmscope_inject_abi_version", "slurmscope_kernel_name", "slurmscope_kernel_records", "slurmscope_kernel_launch"}

var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func checkInjectLib(e *checkEnv) checkResult {
	lib := e.flag("gpu-inject-lib")
	if lib == "" {
		return skipf("not set (--gpu-inject-lib): no GPU kernel profiles")
	}
	hint := "--gpu-inject-lib names the installed libslurmscope_inject.so (the package's /usr/lib/slurmscope/libslurmscope_inject.so; else gpuinject/build.sh); run does not start without it"
	f, err := os.Open(lib)
	if err != nil {
		return failHint(err.Error(), hint)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return failHint(lib+": not a regular file", hint)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return failHint(lib+": not an ELF file: "+err.Error(), hint)
	}
	if ef.Type != elf.ET_DYN {
		return failHint(fmt.Sprintf("%s: an ELF %s, not a shared object", lib, ef.Type), hint)
	}
	if m, ok := elfMachines[e.arch]; ok && ef.Machine != m {
		return failHint(fmt.Sprintf("%s: built for %s, this node is %s", lib, ef.Machine, m), "build it on (or for) the compute nodes: gpuinject/build.sh")
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		return failHint(lib+": no dynamic symbols: "+err.Error(), hint)
	}
	var missing []string
	for _, want := range injectSymbols {
		if !slices.ContainsFunc(syms, func(s elf.Symbol) bool { return s.Name == want && s.Section != elf.SHN_UNDEF }) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return failHint(fmt.Sprintf("%s: an ELF shared object without the marker ABI (no %s)", lib, strings.Join(missing, ", ")), hint)
	}
	found := fmt.Sprintf("%s: ELF shared object (%s) exporting the marker ABI", lib, ef.Machine)
	if up := e.sys("bus", "event_source", "devices", "uprobe"); !exists(up) {
		return warnHint(found+"; but no uprobe event source ("+up+")", "the GPU kernel tracer needs uprobes (CONFIG_UPROBE_EVENTS) and Linux 5.8 or later")
	}
	return okf("%s", found)
}

func checkMetricsAddr(e *checkEnv) checkResult {
	m := e.metricsServer()
	if m == nil || m.addr == "" {
		return skipf("/metrics off (--metrics-addr empty)")
	}
	ln, err := net.Listen("tcp", m.addr)
	if err == nil {
		ln.Close()
		return okf("%s is free: run can serve /metrics there", m.addr)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return failHint(fmt.Sprintf("--metrics-addr %q: %v", m.addr, err), "want host:port, e.g. 127.0.0.1:9810 or :9810; empty disables it")
	}
	if e.healthy(m.addr) {
		return okf("%s is served by a running agent (/-/healthy answers)", m.addr)
	}
	return warnHint(m.addr+" is in use by another program",
		"run exits 2 at start if it cannot listen there: stop what holds it, or choose another --metrics-addr (an agent behind --web.config.file's TLS answers only https)")
}

// healthy reports whether an agent answers /-/healthy at addr.
func (e *checkEnv) healthy(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	c := &http.Client{Timeout: e.timeout}
	resp, err := c.Get("http://" + net.JoinHostPort(host, port) + "/-/healthy")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	return resp.StatusCode == http.StatusOK && strings.HasPrefix(string(b), "OK")
}

// httpConfig is a backend's httpclient.Config as run's flags set it
// (httpclient.RegisterFlags names them --<prefix>-<setting>).
func (e *checkEnv) httpConfig(prefix string) httpclient.Config {
	s := func(name string) string { return e.flag(prefix + "-" + name) }
	c := httpclient.Config{URL: s("url"), Tenant: s("tenant"),
		BasicAuthUser: s("basic-auth-user"), BasicAuthPasswordFile: s("basic-auth-password-file"), BearerTokenFile: s("bearer-token-file"),
		TLS: httpclient.TLSConfig{CAFile: s("ca-file"), CertFile: s("cert-file"), KeyFile: s("key-file"), ServerName: s("server-name"),
			InsecureSkipVerify: s("insecure-skip-verify") == "true"}}
	if d, err := time.ParseDuration(s("timeout")); err == nil {
		c.Timeout = d
	}
	return c
}

// checkBackend checks that the backend whose httpclient flags are
// --<prefix>-* answers at the URL the agent sends to (its URL, then path),
// with the agent's credentials and TLS settings. The agent POSTs; a GET
// proves the way there and the credentials without sending anything.
// hint404 says what the URL should be.
func checkBackend(prefix, path, hint404 string) func(*checkEnv) checkResult {
	return func(e *checkEnv) checkResult {
		flagURL := "--" + prefix + "-url"
		cfg := e.httpConfig(prefix)
		if cfg.URL == "" {
			return skipf("not set (%s)", flagURL)
		}
		u, rt, err := cfg.Build(flagURL, "http(s)://host[:port][/prefix]")
		if err != nil {
			return failHint(err.Error(), "run cannot send there: fix the flag it names")
		}
		target := *u
		if path != "" {
			target.Path = strings.TrimRight(target.Path, "/") + path
			target.RawPath = ""
		}
		shown := target.Redacted()
		c := &http.Client{Transport: rt, Timeout: min(e.timeout, cfg.RequestTimeout()),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(target.String())
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // not the URL again
			}
			p := "--" + prefix + "-"
			return failHint(fmt.Sprintf("GET %s: %v", shown, err),
				"the agent cannot reach it (it would keep what it sends in its spool): check the URL, DNS and firewall, and for TLS "+p+"ca-file, "+p+"cert-file, "+p+"key-file, "+p+"server-name")
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		found := fmt.Sprintf("GET %s: HTTP %d %s", shown, resp.StatusCode, http.StatusText(resp.StatusCode))
		switch code := resp.StatusCode; {
		case code == http.StatusUnauthorized || code == http.StatusForbidden:
			return failHint(found, authHint(prefix, cfg))
		case code == http.StatusNotFound:
			return warnHint(found, hint404)
		case code >= 500:
			return warnHint(found, "the server answers but fails; the agent retries 5xx, keeping what it sends in its spool")
		}
		return okf("reachable, %s (the agent POSTs there)", found)
	}
}

// authHint says which of a backend's flags set its credentials.
func authHint(prefix string, cfg httpclient.Config) string {
	p := "--" + prefix + "-"
	h := "the server wants credentials: " + p + "basic-auth-user with " + p + "basic-auth-password-file, or " + p + "bearer-token-file"
	if cfg.BasicAuthUser != "" || cfg.BearerTokenFile != "" {
		h = "the server refused the credentials of " + p + "basic-auth-user / " + p + "basic-auth-password-file or " + p + "bearer-token-file"
	}
	if cfg.Tenant == "" {
		h += "; a multi-tenant server may also want " + p + "tenant (sent as X-Scope-OrgID)"
	}
	return h
}
