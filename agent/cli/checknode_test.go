package cli

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/gpu"
)

// noDriver is what gpu.New says on a node without the NVIDIA driver.
var noDriver = fmt.Errorf("%w: nvmlInit: ERROR_LIBRARY_NOT_FOUND", gpu.ErrNoDriver)

// nodeEnv parses args as check does, on an x86-64 agent without NVML. The
// fixture trees belong to whoever runs the tests: their cgroups are taken
// as Slurm's.
func nodeEnv(t *testing.T, args ...string) *checkEnv {
	t.Helper()
	cgroupOwner = os.Getuid()
	t.Cleanup(func() { cgroupOwner = 0 })
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f runFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return &checkEnv{f: &f, fs: fs, arch: "amd64", timeout: 2 * time.Second,
		openNVML: func(string) error { return noDriver }}
}

// fixture names the roots of testdata/check/<name>.
func fixture(name string) []string {
	d := filepath.Join("testdata", "check", name)
	return []string{"--proc-root=" + filepath.Join(d, "proc"), "--sys-root=" + filepath.Join(d, "sys"),
		"--cgroup-root=" + filepath.Join(d, "cgroup"), "--metrics-addr=", "--node-name=n1"}
}

// writeTree writes files (path: content) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// status builds /proc/self/status of a process of that uid and CapEff.
func status(uid int, capEff uint64) string {
	return fmt.Sprintf("Name:\tslurmscope-agen\nUid:\t%d\t%d\t%d\t%d\nCapEff:\t%016x\n", uid, uid, uid, uid, capEff)
}

func caps(bits ...int) uint64 {
	var c uint64
	for _, b := range bits {
		c |= 1 << uint(b)
	}
	return c
}

// allCaps is every capability; unitCaps those the unit grants.
const (
	allCaps  = 1<<(unix.CAP_LAST_CAP+1) - 1
	unitCaps = 1<<unix.CAP_BPF | 1<<unix.CAP_PERFMON | 1<<unix.CAP_SYS_ADMIN | 1<<unix.CAP_SYS_PTRACE | 1<<unix.CAP_DAC_READ_SEARCH |
		1<<unix.CAP_SYSLOG | 1<<unix.CAP_SYS_NICE | 1<<unix.CAP_SYS_RESOURCE | 1<<unix.CAP_IPC_LOCK
)

func wantResult(t *testing.T, what string, got checkResult, status checkStatus, substr ...string) {
	t.Helper()
	if got.Status != status {
		t.Errorf("%s: status %s, want %s: %+v", what, got.Status, status, got)
	}
	text := got.Found + " | " + got.Hint
	for _, s := range substr {
		if !strings.Contains(text, s) {
			t.Errorf("%s: %q does not say %q", what, text, s)
		}
	}
	if got.Status != statusOK && got.Status != statusSkip && got.Hint == "" {
		t.Errorf("%s: %s without a hint: %+v", what, got.Status, got)
	}
}

// TestCheckFixtureNodes: each check of the fixture trees, a good node and
// a bare one.
func TestCheckFixtureNodes(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		want    map[string]checkStatus
	}{
		{"node", map[string]checkStatus{
			"flags": statusOK, "kernel": statusOK, "btf": statusOK, "privileges": statusOK, "perf_event_paranoid": statusOK,
			"kallsyms": statusOK, "cgroup": statusOK, "slurm-cgroup": statusOK, "nvml": statusSkip, "gpu-inject-lib": statusSkip,
			"metrics-addr": statusSkip, "pyroscope": statusSkip, "prometheus-remote-write": statusSkip,
		}},
		{"bare", map[string]checkStatus{
			"flags": statusOK, "kernel": statusFail, "btf": statusFail, "privileges": statusFail, "perf_event_paranoid": statusFail,
			"kallsyms": statusWarn, "cgroup": statusOK, "slurm-cgroup": statusWarn, "nvml": statusSkip, "gpu-inject-lib": statusSkip,
			"metrics-addr": statusSkip, "pyroscope": statusSkip, "prometheus-remote-write": statusSkip,
		}},
	} {
		e := nodeEnv(t, fixture(tc.fixture)...)
		got := runChecks(e, nodeChecks)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d results, want %d", tc.fixture, len(got), len(tc.want))
		}
		for _, r := range got {
			want, ok := tc.want[r.Check]
			if !ok {
				t.Errorf("%s: unexpected check %q", tc.fixture, r.Check)
				continue
			}
			wantResult(t, tc.fixture+" "+r.Check, r, want)
		}
	}
}

// TestCheckKernel: the kernel release against the README's requirements
// and the flags that lower them.
func TestCheckKernel(t *testing.T) {
	for _, tc := range []struct {
		release string
		arch    string
		args    []string
		want    checkStatus
		says    string
	}{
		{"6.8.0-45-generic", "amd64", nil, statusOK, "bpf_loop"},
		{"5.17.0", "amd64", nil, statusOK, "Linux 5.17.0"},
		{"5.15.0-91-generic", "amd64", nil, statusWarn, "frame pointers"},
		{"5.15.0-91-generic", "amd64", []string{"--unwind=fp"}, statusOK, "Linux 5.15"},
		{"5.15.0", "arm64", nil, statusWarn, "x86-64 only"},
		{"6.1.0", "arm64", nil, statusWarn, "x86-64 only"},
		{"5.8.0", "amd64", nil, statusWarn, "5.17"},
		{"5.7.19", "amd64", nil, statusFail, "Linux 5.8 or later"},
		{"5.5.0", "amd64", []string{"--unwind=fp", "--python-frames=false", "--offcpu-profiling=false"}, statusOK, "5.5.0"},
		{"5.10.0", "amd64", []string{"--unwind=fp"}, statusWarn, "no off-CPU profiles before Linux 5.15"},
		{"5.5.0", "amd64", []string{"--unwind=fp", "--python-frames=false", "--gpu-inject-lib=/x.so"}, statusFail, "5.8"},
		{"5.4.0", "amd64", []string{"--unwind=fp", "--python-frames=false"}, statusFail, "5.5 is enough"},
		{"4.18.0-553.el8", "amd64", []string{"--cpu-profiling=false", "--offcpu-profiling=false"}, statusOK, "no eBPF source"},
		{"3.10.0-1160.el7.x86_64", "amd64", nil, statusFail, "3.10"},
		{"garbage", "amd64", nil, statusWarn, "not major.minor"},
	} {
		proc := writeTree(t, map[string]string{"sys/kernel/osrelease": tc.release + "\n"})
		e := nodeEnv(t, append([]string{"--proc-root=" + proc}, tc.args...)...)
		e.arch = tc.arch
		wantResult(t, fmt.Sprint(tc.release, tc.arch, tc.args), checkKernel(e), tc.want, tc.says)
	}
}

// TestCheckBTF: /sys/kernel/btf/vmlinux under --sys-root.
func TestCheckBTF(t *testing.T) {
	wantResult(t, "node", checkBTF(nodeEnv(t, fixture("node")...)), statusOK, "btf/vmlinux present")
	wantResult(t, "bare", checkBTF(nodeEnv(t, fixture("bare")...)), statusFail, "missing", "BTF")
	wantResult(t, "bare without eBPF", checkBTF(nodeEnv(t, append(fixture("bare"), "--cpu-profiling=false", "--offcpu-profiling=false")...)), statusSkip)
	dir := writeTree(t, map[string]string{"kernel/btf/vmlinux/x": ""})
	wantResult(t, "a directory", checkBTF(nodeEnv(t, "--sys-root="+dir)), statusFail, "not a regular file")
}

// TestCheckPrivileges: root and the unit's capabilities, from CapEff.
func TestCheckPrivileges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release string
		uid     int
		caps    uint64
		want    checkStatus
		says    []string
	}{
		{"all", "6.8.0", 0, allCaps, statusOK, []string{"uid 0, with every capability"}},
		{"the unit's", "6.8.0", 0, unitCaps, statusOK, nil},
		{"no CAP_SYS_ADMIN after 5.8", "6.8.0", 0, unitCaps &^ (1 << unix.CAP_SYS_ADMIN), statusOK, nil},
		{"no CAP_SYS_ADMIN before 5.8", "5.4.0", 0, unitCaps &^ (1 << unix.CAP_SYS_ADMIN), statusFail, []string{"CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"}},
		{"no CAP_IPC_LOCK after 5.11", "6.8.0", 0, unitCaps &^ (1 << unix.CAP_IPC_LOCK), statusOK, nil},
		{"no CAP_IPC_LOCK before 5.11", "5.10.0", 0, unitCaps &^ (1 << unix.CAP_IPC_LOCK), statusWarn, []string{"CAP_IPC_LOCK for locked BPF memory"}},
		{"no CAP_SYSLOG", "6.8.0", 0, unitCaps &^ (1 << unix.CAP_SYSLOG), statusWarn, []string{"without CAP_SYSLOG", "[kernel]"}},
		{"no CAP_SYS_NICE", "6.8.0", 0, unitCaps &^ (1 << unix.CAP_SYS_NICE), statusWarn, []string{"lower priority"}},
		{"no CAP_BPF", "6.8.0", 0, unitCaps &^ (1<<unix.CAP_BPF | 1<<unix.CAP_SYS_ADMIN), statusFail, []string{"lacks CAP_BPF"}},
		{"no CAP_SYS_PTRACE", "6.8.0", 0, unitCaps &^ (1 << unix.CAP_SYS_PTRACE), statusFail, []string{"lacks CAP_SYS_PTRACE", "jobs' /proc"}},
		{"not root", "6.8.0", 1000, 0, statusFail, []string{"uid 1000", "run check as root"}},
	} {
		proc := writeTree(t, map[string]string{"self/status": status(tc.uid, tc.caps), "sys/kernel/osrelease": tc.release})
		wantResult(t, tc.name, checkPrivileges(nodeEnv(t, "--proc-root="+proc)), tc.want, tc.says...)
	}
	wantResult(t, "no status", checkPrivileges(nodeEnv(t, "--proc-root="+t.TempDir())), statusFail, "--proc-root")
}

// TestCheckParanoid: perf_event_paranoid against the agent's
// capabilities.
func TestCheckParanoid(t *testing.T) {
	for _, tc := range []struct {
		paranoid string
		caps     uint64
		want     checkStatus
		says     string
	}{
		{"2", unitCaps, statusOK, "2"},
		{"-1", unitCaps, statusOK, "-1"},
		{"3", unitCaps, statusOK, "CAP_SYS_ADMIN passes it"},
		{"4", caps(unix.CAP_PERFMON, unix.CAP_BPF), statusWarn, "perf_event_paranoid=2"},
		{"3", 0, statusFail, "without CAP_PERFMON"},
		{"2", 0, statusFail, "without CAP_PERFMON"},
		{"x", unitCaps, statusWarn, "unreadable"},
	} {
		proc := writeTree(t, map[string]string{"self/status": status(0, tc.caps), "sys/kernel/perf_event_paranoid": tc.paranoid + "\n"})
		wantResult(t, tc.paranoid, checkParanoid(nodeEnv(t, "--proc-root="+proc)), tc.want, tc.says)
	}
	proc := writeTree(t, map[string]string{"self/status": status(0, allCaps)})
	wantResult(t, "no perf events", checkParanoid(nodeEnv(t, "--proc-root="+proc)), statusFail, "without perf events")
	wantResult(t, "no eBPF", checkParanoid(nodeEnv(t, "--proc-root="+proc, "--cpu-profiling=false", "--offcpu-profiling=false")), statusSkip)
}

// TestCheckKallsyms: symbolize.KallsymsHidden on the fixture's kallsyms,
// and the hint for why they are hidden.
func TestCheckKallsyms(t *testing.T) {
	shown := "ffffffff81000000 T _stext\nffffffff81001000 T do_one_initcall\n"
	zeros := "0000000000000000 T _stext\n0000000000000000 T do_one_initcall\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  checkStatus
		says  string
	}{
		{"shown", map[string]string{"kallsyms": shown, "self/status": status(0, allCaps)}, statusOK, "kernel frames are named"},
		{"kptr_restrict 2", map[string]string{"kallsyms": zeros, "self/status": status(0, allCaps), "sys/kernel/kptr_restrict": "2"}, statusWarn, "kptr_restrict=1"},
		{"no CAP_SYSLOG", map[string]string{"kallsyms": zeros, "self/status": status(0, unitCaps&^(1<<unix.CAP_SYSLOG)), "sys/kernel/kptr_restrict": "1"}, statusWarn, "needs CAP_SYSLOG"},
		{"hidden otherwise", map[string]string{"kallsyms": zeros, "self/status": status(0, allCaps), "sys/kernel/kptr_restrict": "1"}, statusWarn, "reads as zeros"},
		{"missing", map[string]string{"self/status": status(0, allCaps)}, statusWarn, "unreadable"},
	} {
		wantResult(t, tc.name, checkKallsyms(nodeEnv(t, "--proc-root="+writeTree(t, tc.files))), tc.want, tc.says)
	}
	wantResult(t, "bare", checkKallsyms(nodeEnv(t, fixture("bare")...)), statusWarn, "[kernel]")
}

// TestCheckCgroups: the cgroup mode and Slurm's tree where the layout
// flags say it is.
func TestCheckCgroups(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		mode       checkStatus
		modeSays   string
		slurm      checkStatus
		slurmSays  string
		notRootOwn bool
	}{
		{"v2 with Slurm", fixture("node"), statusOK, "v2 (unified)", statusOK, "v2 /system.slice/slurmstepd.scope", false},
		{"v2 without Slurm", fixture("bare"), statusOK, "v2", statusWarn, "no slurmstepd.scope in /system.slice", false},
		{"v1", fixture("v1"), statusOK, "v1 at", statusOK, "v1 /slurm (cpuset); v1 /slurm (freezer)", false},
		{"hybrid", fixture("hybrid"), statusOK, "hybrid", statusOK, "v2 /system.slice/slurmstepd.scope", false},
		{"multi, elsewhere than the layout says", fixture("multi"), statusOK, "v2", statusWarn, "--slurm-cgroup-v2-parent", false},
		{"multi, this node's", append(fixture("multi"), "--slurm-cgroup-v2-parent=/system.slice,/slurm.slice"), statusOK, "v2", statusOK, "v2 /slurm.slice/n1_slurmstepd.scope", false},
		{"multi, another node's", append(fixture("multi"), "--slurm-cgroup-v2-parent=/slurm.slice", "--node-name=n3"), statusOK, "v2", statusWarn, "--node-name", false},
		{"not root's", fixture("node"), statusOK, "v2", statusFail, "look-alike", true},
		{"bad layout flag", append(fixture("node"), "--slurm-cgroup-v2-parent=system.slice"), statusOK, "v2", statusFail, "absolute cgroup paths", false},
		{"no cgroups", []string{"--cgroup-root=" + t.TempDir()}, statusFail, "no cgroup filesystem", statusFail, "--cgroup-root", false},
	} {
		e := nodeEnv(t, tc.args...)
		if tc.notRootOwn {
			cgroupOwner = os.Getuid() + 1
		}
		wantResult(t, tc.name+": cgroup", checkCgroupMode(e), tc.mode, tc.modeSays)
		wantResult(t, tc.name+": slurm-cgroup", checkSlurmCgroup(e), tc.slurm, tc.slurmSays)
	}
}

// TestCheckNVML: NVML loaded as the agent loads it, a node without GPUs
// skipped, a GPU node without a usable NVML warned of.
func TestCheckNVML(t *testing.T) {
	dev := writeTree(t, map[string]string{"nvidia0": "", "nvidia1": "", "nvidiactl": ""})
	for _, tc := range []struct {
		name string
		args []string
		err  error
		want checkStatus
		says string
	}{
		{"loaded", []string{"--dev-root=" + dev}, nil, statusOK, "2 GPU device files"},
		{"off", []string{"--gpu-metrics=false"}, nil, statusSkip, "--gpu-metrics=false"},
		{"CPU node", []string{"--dev-root=" + t.TempDir()}, noDriver, statusSkip, "no NVIDIA driver (nvmlInit: ERROR_LIBRARY_NOT_FOUND)"},
		{"GPU node without NVML", []string{"--dev-root=" + dev}, noDriver, statusWarn, "--nvml-library"},
		{"--nvml-library wrong", []string{"--nvml-library=/nope/libnvidia-ml.so.1", "--dev-root=" + t.TempDir()}, noDriver, statusWarn, "does not load from /nope/libnvidia-ml.so.1"},
		{"old driver", []string{"--dev-root=" + dev}, errors.New("NVML library lacks nvmlDeviceGetComputeRunningProcesses_v3: driver too old"), statusWarn, "driver too old"},
	} {
		e := nodeEnv(t, tc.args...)
		var asked []string
		e.openNVML = func(lib string) error { asked = append(asked, lib); return tc.err }
		wantResult(t, tc.name, checkNVML(e), tc.want, tc.says)
	}
	// The agent's own loading, of a library that is not there.
	if err := openNVML(filepath.Join(t.TempDir(), "libnvidia-ml.so.1")); !errors.Is(err, gpu.ErrNoDriver) {
		t.Errorf("openNVML of a missing library: %v, want ErrNoDriver", err)
	}
}

// writeTestELF writes a minimal ELF64 little-endian file whose .dynsym
// defines syms.
func writeTestELF(t *testing.T, p string, typ elf.Type, machine elf.Machine, syms ...string) {
	t.Helper()
	le := binary.LittleEndian
	shstr := "\x00.dynstr\x00.dynsym\x00.shstrtab\x00.text\x00"
	name := func(s string) uint32 { return uint32(strings.Index(shstr, "\x00"+s+"\x00") + 1) }
	var dynstr, dynsym bytes.Buffer
	dynstr.WriteByte(0)
	dynsym.Write(make([]byte, elf.Sym64Size))
	for _, s := range syms {
		binary.Write(&dynsym, le, elf.Sym64{Name: uint32(dynstr.Len()), Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC),
			Shndx: 4, Value: 0x1000, Size: 1})
		dynstr.WriteString(s + "\x00")
	}
	const ehdr = 64
	for dynstr.Len()%8 != 0 {
		dynstr.WriteByte(0)
	}
	strOff := uint64(ehdr)
	symOff := strOff + uint64(dynstr.Len())
	shstrOff := symOff + uint64(dynsym.Len())
	textOff := shstrOff + uint64(len(shstr))
	shOff := (textOff + 1 + 7) &^ 7
	var b bytes.Buffer
	binary.Write(&b, le, elf.Header64{
		Ident: [elf.EI_NIDENT]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)},
		Type:  uint16(typ), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Shoff: shOff, Ehsize: ehdr, Phentsize: 56, Shentsize: 64, Shnum: 5, Shstrndx: 3,
	})
	b.Write(dynstr.Bytes())
	b.Write(dynsym.Bytes())
	b.WriteString(shstr)
	b.WriteByte(0xc3) // .text: ret
	for uint64(b.Len()) < shOff {
		b.WriteByte(0)
	}
	for _, sh := range []elf.Section64{
		{},
		{Name: name(".dynstr"), Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Off: strOff, Size: uint64(dynstr.Len()), Addralign: 1},
		{Name: name(".dynsym"), Type: uint32(elf.SHT_DYNSYM), Flags: uint64(elf.SHF_ALLOC), Off: symOff, Size: uint64(dynsym.Len()), Link: 1, Info: 1, Addralign: 8, Entsize: elf.Sym64Size},
		{Name: name(".shstrtab"), Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1},
		{Name: name(".text"), Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC | elf.SHF_EXECINSTR), Addr: 0x1000, Off: textOff, Size: 1, Addralign: 1},
	} {
		binary.Write(&b, le, sh)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckInjectLib: --gpu-inject-lib must be a readable ELF shared
// object with the marker ABI, for this node's architecture.
func TestCheckInjectLib(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libslurmscope_inject.so")
	writeTestELF(t, lib, elf.ET_DYN, elf.EM_X86_64, injectSymbols...)
	exe := filepath.Join(dir, "exe")
	writeTestELF(t, exe, elf.ET_EXEC, elf.EM_X86_64, injectSymbols...)
	other := filepath.Join(dir, "libother.so")
	writeTestELF(t, other, elf.ET_DYN, elf.EM_X86_64, "cuInit", "slurmscope_kernel_name")
	arm := filepath.Join(dir, "libslurmscope_inject.arm64.so")
	writeTestELF(t, arm, elf.ET_DYN, elf.EM_AARCH64, injectSymbols...)
	text := filepath.Join(dir, "taskprolog.sh")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(dir, "unreadable.so")
	writeTestELF(t, unreadable, elf.ET_DYN, elf.EM_X86_64, injectSymbols...)
	os.Chmod(unreadable, 0)
	node := fixture("node")
	for _, tc := range []struct {
		name string
		args []string
		want checkStatus
		says string
	}{
		{"the library", append(node, "--gpu-inject-lib="+lib), statusOK, "exporting the marker ABI"},
		{"not set", node, statusSkip, "not set"},
		{"missing", append(node, "--gpu-inject-lib="+filepath.Join(dir, "nope.so")), statusFail, "no such file"},
		{"a directory", append(node, "--gpu-inject-lib="+dir), statusFail, "not a regular file"},
		{"not ELF", append(node, "--gpu-inject-lib="+text), statusFail, "not an ELF file"},
		{"an executable", append(node, "--gpu-inject-lib="+exe), statusFail, "not a shared object"},
		{"another library", append(node, "--gpu-inject-lib="+other), statusFail, "no slurmscope_inject_abi_version, slurmscope_kernel_records, slurmscope_kernel_launch"},
		{"another architecture", append(node, "--gpu-inject-lib="+arm), statusFail, "built for EM_AARCH64"},
		{"no uprobes", append(fixture("bare"), "--gpu-inject-lib="+lib), statusWarn, "uprobe"},
	} {
		wantResult(t, tc.name, checkInjectLib(nodeEnv(t, tc.args...)), tc.want, tc.says)
	}
	if os.Getuid() != 0 { // root reads it anyway
		wantResult(t, "unreadable", checkInjectLib(nodeEnv(t, "--gpu-inject-lib="+unreadable)), statusFail, "permission denied")
	}
}

// TestCheckBackends: each backend is asked at the URL the agent sends to,
// with its credentials; 401 says which flags set them.
func TestCheckBackends(t *testing.T) {
	var gotPath, gotAuth, gotTenant string
	answer := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAuth, gotTenant = r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Scope-OrgID")
		w.WriteHeader(answer)
	}))
	defer srv.Close()
	// A port nothing listens on: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pyroscope := checkBackend("pyroscope", "/push.v1.PusherService/Push", "base URL")
	remoteWrite := checkBackend("prometheus-remote-write", "", "whole endpoint")
	for _, tc := range []struct {
		name     string
		check    func(*checkEnv) checkResult
		args     []string
		answer   int
		want     checkStatus
		says     []string
		wantPath string
	}{
		{"pyroscope 200", pyroscope, []string{"--pyroscope-url=" + srv.URL + "/prefix/"}, 200, statusOK,
			[]string{"reachable", "HTTP 200 OK"}, "/prefix/push.v1.PusherService/Push"},
		{"pyroscope 405", pyroscope, []string{"--pyroscope-url=" + srv.URL}, 405, statusOK,
			[]string{"HTTP 405 Method Not Allowed"}, "/push.v1.PusherService/Push"},
		{"pyroscope 401", pyroscope, []string{"--pyroscope-url=" + srv.URL}, 401, statusFail,
			[]string{"HTTP 401 Unauthorized", "--pyroscope-basic-auth-user with --pyroscope-basic-auth-password-file", "--pyroscope-bearer-token-file", "--pyroscope-tenant"}, ""},
		{"pyroscope 403 with credentials", pyroscope, []string{"--pyroscope-url=" + srv.URL, "--pyroscope-basic-auth-user=agent",
			"--pyroscope-basic-auth-password-file=" + pw, "--pyroscope-tenant=hpc"}, 403, statusFail,
			[]string{"refused the credentials"}, ""},
		{"pyroscope 404", pyroscope, []string{"--pyroscope-url=" + srv.URL}, 404, statusWarn, []string{"base URL"}, ""},
		{"pyroscope 503", pyroscope, []string{"--pyroscope-url=" + srv.URL}, 503, statusWarn, []string{"retries 5xx"}, ""},
		{"pyroscope refused", pyroscope, []string{"--pyroscope-url=" + refused}, 0, statusFail, []string{"connection refused", "cannot reach it"}, ""},
		{"pyroscope unset", pyroscope, nil, 0, statusSkip, []string{"--pyroscope-url"}, ""},
		{"pyroscope password file missing", pyroscope, []string{"--pyroscope-url=" + srv.URL, "--pyroscope-basic-auth-user=agent",
			"--pyroscope-basic-auth-password-file=" + pw + ".nope"}, 0, statusFail, []string{"password.nope"}, ""},
		{"remote write 405", remoteWrite, []string{"--prometheus-remote-write-url=" + srv.URL + "/api/v1/write"}, 405, statusOK,
			[]string{"reachable"}, "/api/v1/write"},
		{"remote write 401", remoteWrite, []string{"--prometheus-remote-write-url=" + srv.URL + "/api/v1/write"}, 401, statusFail,
			[]string{"--prometheus-remote-write-bearer-token-file"}, ""},
		{"remote write 404", remoteWrite, []string{"--prometheus-remote-write-url=" + srv.URL}, 404, statusWarn, []string{"whole endpoint"}, ""},
		{"remote write refused", remoteWrite, []string{"--prometheus-remote-write-url=" + refused + "/api/v1/write"}, 0, statusFail, []string{"connection refused"}, ""},
	} {
		answer, gotPath = tc.answer, ""
		wantResult(t, tc.name, tc.check(nodeEnv(t, tc.args...)), tc.want, tc.says...)
		if tc.wantPath != "" && gotPath != tc.wantPath {
			t.Errorf("%s: asked %q, want %q", tc.name, gotPath, tc.wantPath)
		}
	}
	// The credentials and tenant go with the request, as the agent's do.
	answer = 200
	wantResult(t, "with credentials", pyroscope(nodeEnv(t, "--pyroscope-url="+srv.URL, "--pyroscope-basic-auth-user=agent",
		"--pyroscope-basic-auth-password-file="+pw, "--pyroscope-tenant=hpc")), statusOK)
	if gotAuth != "Basic YWdlbnQ6czNjcmV0" || gotTenant != "hpc" {
		t.Errorf("sent Authorization %q, X-Scope-OrgID %q", gotAuth, gotTenant)
	}
}

// TestCheckMetricsAddr: a free address, one a running agent serves, one
// another program holds, a bad one.
func TestCheckMetricsAddr(t *testing.T) {
	agent := httptest.NewServer(metricsMux(nil, nil, nil))
	defer agent.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() { // accepts and says nothing
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tc := range []struct {
		addr string
		want checkStatus
		says string
	}{
		{"127.0.0.1:0", statusOK, "is free"},
		{agent.Listener.Addr().String(), statusOK, "running agent"},
		{other.Addr().String(), statusWarn, "in use by another program"},
		{"bogus", statusFail, "want host:port"},
		{"", statusSkip, "off"},
	} {
		wantResult(t, tc.addr, checkMetricsAddr(nodeEnv(t, "--metrics-addr="+tc.addr)), tc.want, tc.says)
	}
}

// TestCheckRunFlags: run's own validation, without binding
// --metrics-addr.
func TestCheckRunFlags(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range []struct {
		args []string
		want checkStatus
		says string
	}{
		{nil, statusOK, "run accepts them"},
		{[]string{"--metrics-addr=" + held.Addr().String()}, statusOK, "run accepts them"},
		{[]string{"--sample-rate=0"}, statusFail, "--sample-rate"},
		{[]string{"--pyroscope-url=pyroscope:4040"}, statusFail, "--pyroscope-url"},
		{[]string{"--log-level=loud"}, statusFail, "--log-level"},
		{[]string{"--slurm-cgroup-v1-parent=slurm"}, statusFail, "--slurm-cgroup-v1-parent"},
	} {
		e := nodeEnv(t, tc.args...)
		wantResult(t, fmt.Sprint(tc.args), checkRunFlags(e), tc.want, tc.says)
		if m := e.metricsServer(); len(tc.args) == 1 && strings.HasPrefix(tc.args[0], "--metrics-addr=") && m.addr != held.Addr().String() {
			t.Errorf("--metrics-addr not restored: %q", m.addr)
		}
	}
}

// TestCheckPanicFails: a check that panics fails; the others still run.
func TestCheckPanicFails(t *testing.T) {
	got := runChecks(nodeEnv(t), []nodeCheck{
		{"boom", func(*checkEnv) checkResult { panic("oops") }},
		{"fine", func(*checkEnv) checkResult { return okf("fine") }},
	})
	if len(got) != 2 || got[0].Status != statusFail || got[0].Check != "boom" || !strings.Contains(got[0].Found, "oops") || got[1].Status != statusOK {
		t.Errorf("got %+v", got)
	}
}

// TestCheckCommand: the subcommand's output, JSON and exit status.
func TestCheckCommand(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"check"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	cgroupOwner = os.Getuid()
	defer func() { cgroupOwner = 0 }()
	// A GPU-less node: NVML is absent or, on a GPU host, present; neither fails.
	code, out, errOut := run(append(fixture("node"), "--gpu-metrics=false")...)
	if code != 0 || errOut != "" {
		t.Errorf("node: exit %d, stderr %q\n%s", code, errOut, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(nodeChecks) {
		t.Errorf("node: %d lines, want %d:\n%s", len(lines), len(nodeChecks), out)
	}
	for i, l := range lines {
		if f := strings.Fields(l); len(f) < 3 || f[1] != nodeChecks[i].name {
			t.Errorf("line %d %q: want status, %s, what was found", i, l, nodeChecks[i].name)
		}
	}
	if !strings.Contains(out, "ok    kernel                   Linux 6.8.0-45-generic") {
		t.Errorf("node: no kernel line:\n%s", out)
	}

	code, out, _ = run(append(fixture("bare"), "--gpu-metrics=false", "--json")...)
	if code != 1 {
		t.Errorf("bare: exit %d, want 1", code)
	}
	var n int
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var r checkResult
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Check == "" || r.Status == "" || r.Found == "" {
			t.Errorf("bare --json line %q: %+v, %v", l, r, err)
		}
		if r.Check == "btf" && (r.Status != statusFail || r.Hint == "") {
			t.Errorf("bare btf: %+v", r)
		}
		n++
	}
	if n != len(nodeChecks) {
		t.Errorf("bare --json: %d lines, want %d", n, len(nodeChecks))
	}

	// Warnings alone do not fail.
	code, out, _ = run(append(fixture("node"), "--gpu-metrics=false", "--cgroup-root="+filepath.Join("testdata", "check", "bare", "cgroup"))...)
	if code != 0 || !strings.Contains(out, "warn  slurm-cgroup") {
		t.Errorf("warning: exit %d\n%s", code, out)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"-h"}, 0, "usage: slurmscope-agent check"},
		{[]string{"--help"}, 0, "-pyroscope-url"},
		{[]string{"--nope"}, 2, "flag provided but not defined"},
		{[]string{"--sample-rate=x"}, 2, "sample-rate"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--check-timeout=0s"}, 2, "--check-timeout"},
	} {
		code, out, errOut := run(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.says) {
			t.Errorf("check %q: exit %d, want %d with %q:\n%s%s", tc.args, code, tc.code, tc.says, out, errOut)
		}
	}
	var stdout bytes.Buffer
	Main([]string{"--help"}, &stdout, &bytes.Buffer{})
	if !strings.Contains(stdout.String(), "\n  check   ") {
		t.Errorf("--help does not list check:\n%s", stdout.String())
	}
}
