package gpuinject

// Tests of the NVTX half of the library (nvtx.c, ABI in slurmscope_nvtx.h),
// run through the NVTX stand-ins in internal/testenv/nvtxstandin: a
// stand-in for NVIDIA's NVTX headers (libnvtx_standin.so) and an annotated
// driver program. No assertion depends on how fast anything runs.

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

var (
	nvtxBuildOnce sync.Once
	nvtxBuildErr  error
)

// builtNVTX builds the library (through built) and the NVTX stand-ins into
// the same directory.
func builtNVTX(t *testing.T) string {
	t.Helper()
	dir := built(t)
	nvtxBuildOnce.Do(func() {
		out, err := exec.Command("sh", "../internal/testenv/nvtxstandin/build.sh", dir).CombinedOutput()
		if err != nil {
			nvtxBuildErr = fmt.Errorf("nvtxstandin/build.sh: %v\n%s", err, out)
		}
	})
	if nvtxBuildErr != nil {
		t.Fatal(nvtxBuildErr)
	}
	return dir
}

// nvtxName is one announced range name.
type nvtxName struct {
	id              uint64
	domain, message string
	length, dlen    int
}

// nvtxState is one "nvtx_state" trace line: the thread struct right after
// an operation.
type nvtxState struct {
	tid, owner, op string
	depth          uint32
	started, stack []uint64
}

type nvtxTraceEntry struct {
	kind  string // nvtx_name, nvtx_thread, nvtx_state
	name  nvtxName
	state nvtxState
	addr  uint64
	tid   string
}

type nvtxRun struct {
	stdout, stderr string
	trace          []nvtxTraceEntry
	summary        map[string]uint64
}

func (r nvtxRun) stdoutField(t *testing.T, key string) string {
	t.Helper()
	for _, l := range strings.Split(r.stdout, "\n") {
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, key+"="); ok {
				return v
			}
		}
	}
	t.Fatalf("no %s= in driver output:\n%s", key, r.stdout)
	return ""
}

func (r nvtxRun) names() map[uint64]nvtxName {
	m := map[uint64]nvtxName{}
	for _, e := range r.trace {
		if e.kind == "nvtx_name" {
			m[e.name.id] = e.name
		}
	}
	return m
}

func (r nvtxRun) states() []nvtxState {
	var out []nvtxState
	for _, e := range r.trace {
		if e.kind == "nvtx_state" {
			out = append(out, e.state)
		}
	}
	return out
}

// nvtxRangeID is the ABI's range id: FNV-1a 64 of domain, 0x00, message,
// with 0 and 1 reserved.
func nvtxRangeID(domain, message string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, c := range []byte(domain + "\x00" + message) {
		h ^= uint64(c)
		h *= 0x100000001b3
	}
	if h <= 1 {
		h = 2
	}
	return h
}

const nvtxOtherID = 1

// runDriver runs the stand-in driver with a clean environment plus env;
// inject=false leaves NVTX_INJECTION64_PATH unset. stdin, if not nil, is
// its input.
func runDriver(t *testing.T, inject bool, env map[string]string, args ...string) nvtxRun {
	t.Helper()
	dir := builtNVTX(t)
	tracePath := filepath.Join(t.TempDir(), "nvtx-trace")
	e := []string{"PATH=" + os.Getenv("PATH"), "LANG=C", "SLURMSCOPE_NVTX_TRACE_FILE=" + tracePath}
	if inject {
		e = append(e, "NVTX_INJECTION64_PATH="+filepath.Join(dir, "libslurmscope_inject.so"))
	}
	for k, v := range env {
		e = append(e, k+"="+v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "nvtx_driver"), args...)
	cmd.Env = e
	cmd.Stdin = strings.NewReader(strings.Repeat("go\n", 16))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := nvtxRun{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		t.Fatalf("nvtx_driver %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "driver done") {
		t.Fatalf("driver did not finish:\n%s", r.stdout)
	}
	r.trace, r.summary = readNVTXTrace(t, tracePath)
	return r
}

func hexID(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatalf("bad id %q", s)
	}
	return v
}

func readNVTXTrace(t *testing.T, path string) ([]nvtxTraceEntry, map[string]uint64) {
	t.Helper()
	summary := map[string]uint64{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, summary
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []nvtxTraceEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# nvtx "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				summary[k] = mustUint(t, v)
			}
			continue
		}
		kind, rest, _ := strings.Cut(line, " ")
		fields := map[string]string{}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			fields[k] = v
		}
		e := nvtxTraceEntry{kind: kind}
		switch kind {
		case "nvtx_name":
			d, err1 := url.PathUnescape(fields["domain"])
			m, err2 := url.PathUnescape(fields["message"])
			if err1 != nil || err2 != nil {
				t.Fatalf("bad escape in %q", line)
			}
			e.name = nvtxName{id: hexID(t, fields["id"]), domain: d, message: m,
				length: int(mustUint(t, fields["len"])), dlen: int(mustUint(t, fields["domain_len"]))}
		case "nvtx_thread":
			e.addr, e.tid = hexID(t, fields["addr"]), fields["tid"]
		case "nvtx_state":
			s := nvtxState{tid: fields["tid"], owner: fields["owner"], op: fields["op"],
				depth: uint32(mustUint(t, fields["depth"]))}
			for _, x := range strings.Split(fields["started"], ",") {
				s.started = append(s.started, hexID(t, x))
			}
			if fields["stack"] != "" {
				for _, x := range strings.Split(fields["stack"], ",") {
					s.stack = append(s.stack, hexID(t, x))
				}
			}
			e.state = s
		default:
			t.Fatalf("unknown trace line %q", line)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out, summary
}

var traceState = map[string]string{"SLURMSCOPE_NVTX_TRACE_STATE": "1"}

// assertNVTXTraceConsistent: every announced name hashes to its id and
// respects the caps; every id in a struct was announced before it appeared
// (in trace order, which is the order of the marker calls); every thread
// announced its struct before its first range; stored entries never exceed
// the cap.
func assertNVTXTraceConsistent(t *testing.T, r nvtxRun) {
	t.Helper()
	known := map[uint64]bool{}
	threads := map[string]bool{}
	for i, e := range r.trace {
		switch e.kind {
		case "nvtx_name":
			n := e.name
			if n.id == nvtxOtherID {
				if n.message != "(other NVTX ranges)" || n.domain != "" {
					t.Errorf("other id announced as %q/%q", n.domain, n.message)
				}
			} else if got := nvtxRangeID(n.domain, n.message); got != n.id {
				t.Errorf("line %d: name %q/%q announced with id %x, hash is %x", i, n.domain, n.message, n.id, got)
			}
			if n.length != len(n.domain)+1+len(n.message) || n.dlen != len(n.domain) {
				t.Errorf("line %d: len=%d domain_len=%d for %q/%q", i, n.length, n.dlen, n.domain, n.message)
			}
			if len(n.message) > 256 || len(n.domain) > 64 {
				t.Errorf("line %d: name beyond the caps: domain %d bytes, message %d bytes", i, len(n.domain), len(n.message))
			}
			known[n.id] = true
		case "nvtx_thread":
			threads[e.tid] = true
		case "nvtx_state":
			s := e.state
			if !threads[s.owner] {
				t.Errorf("line %d: state of thread %s before its nvtx_thread announcement", i, s.owner)
			}
			if len(s.stack) > 32 || len(s.stack) != int(min(s.depth, 32)) || len(s.started) != 8 {
				t.Errorf("line %d: depth %d with %d stored entries, %d started slots", i, s.depth, len(s.stack), len(s.started))
			}
			for _, id := range append(append([]uint64{}, s.stack...), s.started...) {
				if id != 0 && !known[id] {
					t.Errorf("line %d: id %x in a struct before its name was announced", i, id)
				}
			}
		}
	}
}

// stackNames renders the stored stack of a state as "domain/message" names
// ("-" for a closed entry).
func stackNames(names map[uint64]nvtxName, ids []uint64) string {
	var parts []string
	for _, id := range ids {
		switch n, ok := names[id]; {
		case id == 0:
			parts = append(parts, "-")
		case ok && n.domain != "":
			parts = append(parts, n.domain+"/"+n.message)
		case ok:
			parts = append(parts, n.message)
		default:
			parts = append(parts, fmt.Sprintf("?%x", id))
		}
	}
	return strings.Join(parts, ",")
}

func startedNames(names map[uint64]nvtxName, ids []uint64) string {
	var nz []uint64
	for _, id := range ids {
		if id != 0 {
			nz = append(nz, id)
		}
	}
	return stackNames(names, nz)
}

// The library exports the NVTX entry point and both markers, and the
// markers start with their frame setup like the kernel markers.
func TestNVTXExportsAndMarkerPrologues(t *testing.T) {
	dir := built(t)
	path := filepath.Join(dir, "libslurmscope_inject.so")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]elf.Symbol{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			found[s.Name] = s
		}
	}
	for _, name := range []string{"InitializeInjectionNvtx2", "slurmscope_nvtx_range_name", "slurmscope_nvtx_thread"} {
		s, ok := found[name]
		if !ok || elf.ST_TYPE(s.Info) != elf.STT_FUNC || elf.ST_BIND(s.Info) != elf.STB_GLOBAL || s.Size == 0 {
			t.Fatalf("%s not exported as a function (%v)", name, ok)
		}
	}
	if s, ok := found["slurmscope_nvtx_abi_version"]; !ok || elf.ST_TYPE(s.Info) != elf.STT_OBJECT {
		t.Fatal("slurmscope_nvtx_abi_version not exported as data")
	}
	for _, name := range []string{"slurmscope_nvtx_range_name", "slurmscope_nvtx_thread"} {
		s := found[name]
		var b []byte
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && s.Value >= p.Vaddr && s.Value+8 <= p.Vaddr+p.Filesz {
				b = make([]byte, 8)
				if _, err := p.ReadAt(b, int64(s.Value-p.Vaddr)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if b == nil {
			t.Fatalf("%s in no executable segment", name)
		}
		switch runtime.GOARCH {
		case "amd64":
			if !bytes.Equal(b[:4], []byte{0x55, 0x48, 0x89, 0xe5}) {
				t.Errorf("%s starts with % x, want push %%rbp; mov %%rsp,%%rbp", name, b[:4])
			}
		case "arm64":
			insn := binary.LittleEndian.Uint32(b)
			if insn == 0xd503233f || insn == 0xd503245f {
				insn = binary.LittleEndian.Uint32(b[4:])
			}
			if insn != 0xa9bf7bfd {
				t.Errorf("%s starts with %08x, want stp x29, x30, [sp, #-16]!", name, insn)
			}
		}
	}
}

// (iv) The must-show workload: step > phase_a then step > phase_b, exactly,
// every step; names announced before use.
func TestNVTXWorkloadRanges(t *testing.T) {
	r := runDriver(t, true, traceState, "workload", "20")
	assertNVTXTraceConsistent(t, r)
	if r.stdoutField(t, "injected") != "1" {
		t.Fatalf("not injected:\n%s%s", r.stdout, r.stderr)
	}
	names := r.names()
	want := []string{"step", "step,phase_a", "step", "step,phase_b", "step", ""}
	states := r.states()
	if len(states) != 20*len(want) {
		t.Fatalf("%d state changes, want %d", len(states), 20*len(want))
	}
	tid := r.stdoutField(t, "tid")
	for i, s := range states {
		if got := stackNames(names, s.stack); got != want[i%len(want)] || s.owner != tid || s.tid != tid {
			t.Fatalf("change %d: stack %q on %s/%s, want %q on %s", i, got, s.tid, s.owner, want[i%len(want)], tid)
		}
	}
	t.Logf("%s", strings.TrimSpace(r.stdout))
}

// (i) Domains share the thread's stack in push order; a pop of a domain
// whose innermost range is covered closes it in place; levels are per
// domain as NVTX specifies.
func TestNVTXInterleavedDomains(t *testing.T) {
	r := runDriver(t, true, traceState, "interleave")
	assertNVTXTraceConsistent(t, r)
	names := r.names()
	var got []string
	for _, s := range r.states() {
		got = append(got, fmt.Sprintf("%d[%s]", s.depth, stackNames(names, s.stack)))
	}
	want := "1[d1/x] 2[d1/x,d2/y] 3[d1/x,d2/y,d2/z] 3[-,d2/y,d2/z] 2[-,d2/y] 0[]"
	if strings.Join(got, " ") != want {
		t.Fatalf("states %s\nwant   %s", strings.Join(got, " "), want)
	}
	if l := r.stdoutField(t, "levels"); l != "0,0,1" {
		t.Errorf("push levels %s, want 0,0,1", l)
	}
	if p := r.stdoutField(t, "pops"); p != "0,1,0" {
		t.Errorf("pop levels %s, want 0,1,0", p)
	}
}

// (i) The struct in the process's memory, read the way the agent reads it
// (raw offsets of slurmscope_nvtx.h from /proc/PID/mem), at three pauses.
func TestNVTXLayoutInProcessMemory(t *testing.T) {
	dir := builtNVTX(t)
	tracePath := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(filepath.Join(dir, "nvtx_driver"), "layout")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NVTX_INJECTION64_PATH=" + filepath.Join(dir, "libslurmscope_inject.so"),
		"SLURMSCOPE_NVTX_TRACE_FILE=" + tracePath}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("no output; stderr %s", stderr.String())
	}
	var tid uint32
	if _, err := fmt.Sscanf(lines.Text(), "driver tid=%d injected=1", &tid); err != nil {
		t.Fatalf("first line %q", lines.Text())
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", cmd.Process.Pid))
	if err != nil {
		t.Skipf("cannot read the driver's memory: %v", err)
	}
	defer mem.Close()
	outer, inner, async := nvtxRangeID("", "outer"), nvtxRangeID("layout_domain", "inner"), nvtxRangeID("", "async_range")
	want := map[int]struct {
		depth   uint32
		started uint64
		stack   []uint64
	}{
		1: {2, async, []uint64{outer, inner}},
		2: {2, async, []uint64{0, inner}},
		3: {0, 0, nil},
	}
	var addr uint64
	for pause := 1; pause <= 3; pause++ {
		if !lines.Scan() || lines.Text() != fmt.Sprintf("pause %d", pause) {
			t.Fatalf("want pause %d, got %q (stderr %s)", pause, lines.Text(), stderr.String())
		}
		if addr == 0 {
			trace, _ := readNVTXTrace(t, tracePath)
			for _, e := range trace {
				if e.kind == "nvtx_thread" && e.tid == fmt.Sprint(tid) {
					addr = e.addr
				}
			}
			if addr == 0 {
				t.Fatal("no nvtx_thread announcement for the driver's thread")
			}
		}
		b := make([]byte, 344)
		if _, err := mem.ReadAt(b, int64(addr)); err != nil {
			t.Fatalf("read %#x: %v", addr, err)
		}
		le := binary.LittleEndian
		if le.Uint32(b[0:]) != 0x564e5353 || le.Uint16(b[4:]) != 1 || le.Uint16(b[6:]) != 32 || le.Uint16(b[16:]) != 8 {
			t.Fatalf("header % x", b[:24])
		}
		if le.Uint32(b[8:]) != tid {
			t.Fatalf("tid %d, want %d", le.Uint32(b[8:]), tid)
		}
		w := want[pause]
		depth := le.Uint32(b[12:])
		if depth != w.depth {
			t.Fatalf("pause %d: depth %d, want %d", pause, depth, w.depth)
		}
		var started []uint64
		for i := 0; i < 8; i++ {
			if id := le.Uint64(b[24+8*i:]); id != 0 {
				started = append(started, id)
			}
		}
		if (w.started == 0 && len(started) != 0) || (w.started != 0 && (len(started) != 1 || started[0] != w.started)) {
			t.Fatalf("pause %d: started %x, want %x", pause, started, w.started)
		}
		for i := 0; i < int(depth); i++ {
			if id := le.Uint64(b[88+8*i:]); id != w.stack[i] {
				t.Fatalf("pause %d: stack[%d] = %x, want %x", pause, i, id, w.stack[i])
			}
		}
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("driver: %v\n%s", err, stderr.String())
	}
}

// (ii), (iii) Every hostile mode exits 0, stays within the caps and keeps
// the trace consistent (names before use, right ids).
func TestNVTXHostileInputStaysBounded(t *testing.T) {
	cases := []struct {
		args  []string
		state bool // trace every change (not for the million-name run)
		check func(t *testing.T, r nvtxRun)
	}{
		{[]string{"unbalanced"}, true, func(t *testing.T, r nvtxRun) {
			if r.stdoutField(t, "negative_pops") != "2001" || r.summary["unbalanced_pops"] != 2001 {
				t.Errorf("unbalanced pops: driver %s, library %d, want 2001", r.stdoutField(t, "negative_pops"), r.summary["unbalanced_pops"])
			}
			for _, s := range r.states() {
				if s.depth > 1 {
					t.Errorf("depth %d after unbalanced pops", s.depth)
				}
			}
		}},
		{[]string{"names", "1000000"}, false, func(t *testing.T, r nvtxRun) {
			if r.summary["names"] != 4096 || r.summary["other_uses"] != 1000000-4096 {
				t.Errorf("names %d other_uses %d, want 4096 and %d", r.summary["names"], r.summary["other_uses"], 1000000-4096)
			}
			if n := len(r.names()); n > 4097 {
				t.Errorf("%d distinct names announced, want at most 4096 + other", n)
			}
		}},
		{[]string{"long"}, true, func(t *testing.T, r nvtxRun) {
			if r.summary["truncated"] != 4 {
				t.Errorf("truncated %d, want 4", r.summary["truncated"])
			}
			want := map[string]bool{strings.Repeat("x", 256): true, strings.Repeat("é", 128): true}
			for _, n := range r.names() {
				if n.domain == "" && n.id != nvtxOtherID && !want[n.message] {
					t.Errorf("unexpected name %q", n.message)
				}
				if n.domain != "" && (n.domain != strings.Repeat("x", 64) || n.message != strings.Repeat("x", 256)) {
					t.Errorf("long domain range %d/%d bytes", len(n.domain), len(n.message))
				}
			}
		}},
		{[]string{"domains", "1000"}, true, func(t *testing.T, r nvtxRun) {
			if r.summary["domains"] != 64 || r.summary["domain_overflow"] != 1000-64 {
				t.Errorf("domains %d overflow %d", r.summary["domains"], r.summary["domain_overflow"])
			}
			if _, ok := r.names()[nvtxRangeID("(other)", "in_domain")]; !ok {
				t.Errorf("no (other) domain range announced")
			}
		}},
		{[]string{"deep", "20000"}, true, func(t *testing.T, r nvtxRun) {
			if r.summary["deep_pushes"] != 20000-32 || r.summary["unbalanced_pops"] != 5 {
				t.Errorf("deep_pushes %d unbalanced_pops %d", r.summary["deep_pushes"], r.summary["unbalanced_pops"])
			}
			if r.stdoutField(t, "first_pop_level") != "19999" {
				t.Errorf("first pop level %s", r.stdoutField(t, "first_pop_level"))
			}
			st := r.states()
			if last := st[len(st)-1]; last.depth != 0 {
				t.Errorf("depth %d at the end", last.depth)
			}
		}},
		{[]string{"wide"}, true, func(t *testing.T, r nvtxRun) {
			names := r.names()
			for _, want := range [][2]string{{"", "a\uFFFDb\uFFFD\U0001F600é\uFFFD"}, {"", "plain wide"}, {"wide_domain", "wide_in_domain"}} {
				if _, ok := names[nvtxRangeID(want[0], want[1])]; !ok {
					t.Errorf("no name %q/%q; have %v", want[0], want[1], names)
				}
			}
		}},
		{[]string{"handles"}, true, func(t *testing.T, r nvtxRun) {
			if r.summary["bad_handles"] != 3 || r.summary["started_overflow"] != 4 {
				t.Errorf("bad_handles %d started_overflow %d, want 3 and 4", r.summary["bad_handles"], r.summary["started_overflow"])
			}
			st := r.states()
			if last := st[len(st)-1]; last.depth != 0 || startedNames(r.names(), last.started) != "" {
				t.Errorf("left open: %+v", last)
			}
		}},
		{[]string{"threads"}, true, func(t *testing.T, r nvtxRun) {
			names := r.names()
			main := r.stdoutField(t, "tid")
			addrs := map[uint64]bool{}
			for _, e := range r.trace {
				if e.kind == "nvtx_thread" {
					addrs[e.addr] = true
				}
			}
			if len(addrs) > 2 || r.summary["thread_structs_allocated"] != 64 {
				t.Errorf("%d struct addresses for 202 sequential threads, %d allocated", len(addrs), r.summary["thread_structs_allocated"])
			}
			ended := false
			for _, s := range r.states() {
				if s.op == "end" && s.tid == main && s.owner != main && startedNames(names, s.started) == "" {
					ended = true
				}
				if s.op == "end" && s.tid == main && s.owner == "0" {
					t.Errorf("end of a range whose thread had exited changed a struct")
				}
			}
			if !ended {
				t.Errorf("range started on a thread and ended on main not cleared")
			}
		}},
		{[]string{"registered"}, true, func(t *testing.T, r nvtxRun) {
			names := r.names()
			var got []string
			for _, s := range r.states() {
				got = append(got, stackNames(names, s.stack))
			}
			want := "reg_domain/registered_range reg_domain/registered_range,reg_domain/registered_wide reg_domain/registered_range "
			if strings.Join(got, " ") != want {
				t.Errorf("stacks %q, want %q", strings.Join(got, " "), want)
			}
			if r.summary["registered"] != 3 || r.summary["registered_overflow"] != 0 {
				t.Errorf("registered %d overflow %d", r.summary["registered"], r.summary["registered_overflow"])
			}
		}},
		{[]string{"fork"}, true, func(t *testing.T, r nvtxRun) {
			child := r.stdoutField(t, "tid")
			for _, l := range strings.Split(r.stdout, "\n") {
				if c, ok := strings.CutPrefix(l, "driver child tid="); ok {
					child = c
				}
			}
			names := r.names()
			seen := false
			for _, s := range r.states() {
				if s.owner == child && stackNames(names, s.stack) == "before_fork,in_child" {
					seen = true
				}
			}
			if !seen || r.stdoutField(t, "child_status") != "0" {
				t.Errorf("child's ranges not on a struct owned by the child (%s)", child)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.args[0], func(t *testing.T) {
			env := map[string]string{}
			if c.state {
				env = traceState
			}
			r := runDriver(t, true, env, c.args...)
			assertNVTXTraceConsistent(t, r)
			if r.summary["names"] > 4096 || r.summary["domains"] > 64 || r.summary["registered"] > 4096 {
				t.Errorf("caps exceeded: %v", r.summary)
			}
			c.check(t, r)
			// The driver's own peak RSS (VmHWM), including the 5 MiB of
			// messages the long mode allocates itself.
			hwm := mustUint(t, r.stdoutField(t, "vmhwm_kib"))
			t.Logf("peak RSS %d KiB; %v", hwm, r.summary)
			if hwm > 32<<10 {
				t.Errorf("peak RSS %d KiB", hwm)
			}
		})
	}
}

// Several copies of the NVTX headers in one process (one per library that
// includes them) each initialise the tool and share its structs.
func TestNVTXTwoHeaderCopies(t *testing.T) {
	dir := builtNVTX(t)
	r := runDriver(t, true, traceState, "twocopies", filepath.Join(dir, "libnvtx_standin_b.so"))
	assertNVTXTraceConsistent(t, r)
	if r.summary["inits"] != 2 || r.stdoutField(t, "copy_b_injected") != "1" || r.stdoutField(t, "copy_b_level") != "1" {
		t.Fatalf("inits %d; %s", r.summary["inits"], r.stdout)
	}
	names := r.names()
	st := r.states()
	if len(st) < 2 || stackNames(names, st[1].stack) != "from_copy_a,from_copy_b" {
		t.Fatalf("states %+v", st)
	}
}

// Without NVTX_INJECTION64_PATH (or with a bad one) the headers stay no-ops
// and the program runs.
func TestNVTXWithoutInjection(t *testing.T) {
	dir := builtNVTX(t)
	r := runDriver(t, false, nil, "workload", "2")
	if r.stdoutField(t, "injected") != "0" || len(r.trace) != 0 {
		t.Fatalf("injected without NVTX_INJECTION64_PATH: %s", r.stdout)
	}
	for _, bad := range []string{filepath.Join(dir, "no-such-lib.so"), filepath.Join(dir, "mock", "libcupti.so")} {
		r := runDriver(t, false, map[string]string{"NVTX_INJECTION64_PATH": bad}, "workload", "2")
		if r.stdoutField(t, "injected") != "0" {
			t.Fatalf("%s: injected", bad)
		}
	}
}

// An agent started late learns names and thread structs from the periodic
// re-announcement.
func TestNVTXReannounces(t *testing.T) {
	r := runDriver(t, true, map[string]string{"SLURMSCOPE_INJECT_FLUSH_MS": "50"}, "workload", "1000000", "0.6")
	assertNVTXTraceConsistent(t, r)
	tid := r.stdoutField(t, "tid")
	threadLines, phaseA := 0, 0
	for _, e := range r.trace {
		if e.kind == "nvtx_thread" && e.tid == tid {
			threadLines++
		}
		if e.kind == "nvtx_name" && e.name.message == "phase_a" {
			phaseA++
		}
	}
	if threadLines < 3 || phaseA < 3 || r.summary["reannounced_names"] == 0 || r.summary["reannounced_threads"] == 0 {
		t.Fatalf("thread announced %d times, phase_a %d times; %v", threadLines, phaseA, r.summary)
	}
}

// The cost of a push+pop through the headers' slots, with and without the
// library. Printed, never asserted.
func TestNVTXPushPopCost(t *testing.T) {
	with := runDriver(t, true, nil, "bench", "2000000")
	without := runDriver(t, false, nil, "bench", "2000000")
	for _, r := range []nvtxRun{with, without} {
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "bench ") {
				t.Logf("injected=%s %s", r.stdoutField(t, "injected"), l)
			}
		}
	}
}

// Python drives the stand-in through ctypes, as a framework's NVTX binding
// would drive NVIDIA's.
func TestNVTXPythonCtypes(t *testing.T) {
	testenv.Require(t, testenv.Tools("python3"))
	dir := builtNVTX(t)
	tracePath := filepath.Join(t.TempDir(), "trace")
	script := `
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
lib.nvtxRangePushW.argtypes = [ctypes.c_wchar_p]
lib.nvtxDomainCreateA.restype = ctypes.c_void_p
lib.nvtxDomainCreateA.argtypes = [ctypes.c_char_p]
lib.nvtxDomainRangePop.argtypes = [ctypes.c_void_p]
class Attr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint16), ("size", ctypes.c_uint16), ("category", ctypes.c_uint32),
                ("color_type", ctypes.c_int32), ("color", ctypes.c_uint32), ("payload_type", ctypes.c_int32),
                ("reserved0", ctypes.c_int32), ("payload", ctypes.c_uint64), ("message_type", ctypes.c_int32),
                ("message", ctypes.c_char_p)]
lib.nvtxDomainRangePushEx.argtypes = [ctypes.c_void_p, ctypes.POINTER(Attr)]
assert ctypes.sizeof(Attr) == 48
lib.nvtxRangeStartA.restype = ctypes.c_uint64
lib.nvtxRangeStartA.argtypes = [ctypes.c_char_p]
lib.nvtxRangeEnd.argtypes = [ctypes.c_uint64]
print("levels", lib.nvtxRangePushA(b"py_outer"), lib.nvtxRangePushW("py_wide_\u00e9"))
d = lib.nvtxDomainCreateA(b"py_domain")
a = Attr(version=3, size=48, message_type=1, message=b"py_in_domain")
lib.nvtxDomainRangePushEx(d, ctypes.byref(a))
r = lib.nvtxRangeStartA(b"py_started")
lib.nvtxDomainRangePop(d)
lib.nvtxRangeEnd(r)
print("pops", lib.nvtxRangePop(), lib.nvtxRangePop(), lib.nvtxRangePop())
`
	cmd := exec.Command("python3", "-c", script, filepath.Join(dir, "libnvtx_standin.so"))
	cmd.Env = append(os.Environ(), "NVTX_INJECTION64_PATH="+filepath.Join(dir, "libslurmscope_inject.so"),
		"SLURMSCOPE_NVTX_TRACE_FILE="+tracePath, "SLURMSCOPE_NVTX_TRACE_STATE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "levels 0 1") || !strings.Contains(string(out), "pops 1 0 -1") {
		t.Fatalf("python output:\n%s", out)
	}
	var r nvtxRun
	r.trace, r.summary = readNVTXTrace(t, tracePath)
	assertNVTXTraceConsistent(t, r)
	names := r.names()
	var got []string
	for _, s := range r.states() {
		got = append(got, s.op+"["+startedNames(names, s.started)+"|"+stackNames(names, s.stack)+"]")
	}
	want := "push[|py_outer] push[|py_outer,py_wide_é] push[|py_outer,py_wide_é,py_domain/py_in_domain] " +
		"start[py_started|py_outer,py_wide_é,py_domain/py_in_domain] pop[py_started|py_outer,py_wide_é] " +
		"end[|py_outer,py_wide_é] pop[|py_outer] pop[|]"
	if strings.Join(got, " ") != want {
		t.Fatalf("states\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
}
