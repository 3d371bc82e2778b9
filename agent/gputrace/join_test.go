package gputrace

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

var t0 = time.Unix(1000, 0)

func testLimits() limits {
	return limits{maxProcesses: 8, maxLaunches: 64, maxLaunchesPerProcess: 32, maxHeld: 16,
		maxNamesPerProcess: 16, maxNameBytes: 4096, launchTimeout: time.Minute, recordGrace: time.Second}
}

func hdr(pid int, start uint64) header { return header{proc: procfs.ID{PID: pid, Start: start}} }

func nameEv(pid int, start uint64, name string) nameEvent {
	return nameEvent{header: hdr(pid, start), nameID: nameIDOf([]byte(name)), len: uint32(len(name)), name: []byte(name)}
}

func launchEv(pid int, start, cid uint64, name string, stack ...uint64) launchEvent {
	return launchEvent{header: hdr(pid, start), correlationID: cid, nameID: nameIDOf([]byte(name)), tid: uint32(pid), stack: stack}
}

func rec(cid uint64, name string, ns uint64, sampled bool) kernelRecord {
	return kernelRecord{correlationID: cid, startNs: 100, endNs: 100 + ns, nameID: nameIDOf([]byte(name)),
		gpuInstance: GPUInstanceNone, sampled: sampled}
}

func always(procfs.ID) bool { return true }

// perKernel sums samples by (pid, kernel).
func perKernel(samples []Sample) map[string]sums {
	m := map[string]sums{}
	for _, s := range samples {
		k := string(rune('0'+s.Proc.PID)) + "/" + s.KernelRaw
		v := m[k]
		v.add(s.GPUTime, s.Launches)
		m[k] = v
	}
	return m
}

func TestJoinMatchesAndSpreadsUnsampledExactly(t *testing.T) {
	j := newJoiner(testLimits())
	j.name(nameEv(1, 5, "gemm"))
	j.launch(launchEv(1, 5, 1, "gemm", 0xa, 0xb), t0)
	j.launch(launchEv(1, 5, 2, "gemm", 0xa, 0xb), t0)
	j.launch(launchEv(1, 5, 3, "gemm", 0xc, 0xd), t0)
	// Sampled: stack ab 10+20 ns, stack cd 70 ns. Unsampled: 7 records of
	// 143 ns = 1001 ns, which splits 30:70 by time -> 300.3 / 700.7, and
	// 2:1 by launches -> 4.67 / 2.33.
	j.records(hdr(1, 5), []kernelRecord{rec(1, "gemm", 10, true), rec(2, "gemm", 20, true), rec(3, "gemm", 70, true)}, t0)
	var unsampled []kernelRecord
	for cid := uint64(100); cid < 107; cid++ {
		unsampled = append(unsampled, rec(cid, "gemm", 143, false))
	}
	j.records(hdr(1, 5), unsampled, t0)
	out := j.drain(t0, always)
	if len(out) != 2 {
		t.Fatalf("samples %+v", out)
	}
	byStack := map[uint64]Sample{}
	for _, s := range out {
		byStack[s.User[0]] = s
		if s.Proc != (procfs.ID{PID: 1, Start: 5}) || s.Kernel != "gemm" || s.Unsampled {
			t.Errorf("sample %+v", s)
		}
	}
	ab, cd := byStack[0xa], byStack[0xc]
	// 300.3 -> 300, 700.7 -> 701 (largest remainder); 4.67 -> 5, 2.33 -> 2.
	if ab.GPUTime != 30+300 || cd.GPUTime != 70+701 || ab.Launches != 2+5 || cd.Launches != 1+2 {
		t.Errorf("ab %+v cd %+v", ab, cd)
	}
	if total := ab.GPUTime + cd.GPUTime; total != 100+1001 {
		t.Errorf("total %d", total)
	}
	if j.stacks.live() != 0 || j.launches.Len() != 0 {
		t.Errorf("state left after drain: %d stacks, %d launches", j.stacks.live(), j.launches.Len())
	}
}

// Rate-limited sampling over many kernels and stacks, random durations:
// per-kernel totals must equal the records' sum exactly.
func TestJoinExactTotalsUnderSampling(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	j := newJoiner(limits{maxProcesses: 8, maxLaunches: 1 << 20, maxLaunchesPerProcess: 1 << 20, maxHeld: 16,
		maxNamesPerProcess: 16, maxNameBytes: 4096, launchTimeout: time.Minute, recordGrace: time.Second})
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		j.name(nameEv(1, 1, n))
		j.name(nameEv(2, 1, n))
	}
	want := map[string]sums{}
	for round := 0; round < 3; round++ {
		for cid := uint64(1); cid <= 5000; cid++ {
			pid := int(1 + cid%2)
			name := names[r.IntN(len(names))]
			if name == "d" && pid == 2 {
				name = "c"
			}
			sampled := r.IntN(50) == 0 && name != "d" // d is never sampled
			if sampled {
				j.launch(launchEv(pid, 1, cid, name, uint64(1+r.IntN(3)), 0x99), t0)
			}
			ns := uint64(r.Int64N(1 << 40))
			j.records(hdr(pid, 1), []kernelRecord{rec(cid, name, ns, sampled)}, t0)
			k := string(rune('0'+pid)) + "/" + name
			v := want[k]
			v.add(ns, 1)
			want[k] = v
		}
		got := perKernel(j.drain(t0, always))
		for k, v := range want {
			if got[k] != v {
				t.Errorf("round %d %s: got %+v want %+v", round, k, got[k], v)
			}
		}
		clear(want)
	}
}

func TestJoinUnsampledFrameWithoutAnySampledStack(t *testing.T) {
	j := newJoiner(testLimits())
	j.name(nameEv(1, 1, "k"))
	j.records(hdr(1, 1), []kernelRecord{rec(1, "k", 5, false), rec(2, "k", 6, false)}, t0)
	out := j.drain(t0, always)
	if len(out) != 1 || !out[0].Unsampled || out[0].User != nil || out[0].GPUTime != 11 || out[0].Launches != 2 {
		t.Fatalf("%+v", out)
	}
}

// A record flagged sampled whose launch has not been seen waits for it, then
// counts unsampled after the grace period.
func TestJoinOrderingAndHeldRecords(t *testing.T) {
	j := newJoiner(testLimits())
	j.records(hdr(1, 1), []kernelRecord{rec(1, "k", 5, true), rec(2, "k", 7, true)}, t0)
	j.launch(launchEv(1, 1, 1, "k", 0x1), t0.Add(100*time.Millisecond)) // late launch: joins
	out := j.drain(t0.Add(200*time.Millisecond), always)
	if len(out) != 1 || out[0].GPUTime != 5 || out[0].Unsampled {
		t.Fatalf("before grace: %+v", out)
	}
	out = j.drain(t0.Add(2*time.Second), always)
	if len(out) != 1 || out[0].GPUTime != 7 || !out[0].Unsampled || j.st.ExpiredHeld != 1 {
		t.Fatalf("after grace: %+v, %+v", out, j.st)
	}
}

func TestJoinLaunchTimeoutAndGraphs(t *testing.T) {
	j := newJoiner(testLimits())
	g := launchEv(1, 1, 7, "", 0x1)
	g.nameID, g.flags = 0, FlagGraph
	j.launch(g, t0)
	j.launch(launchEv(1, 1, 8, "k", 0x2), t0) // never completes
	// Two kernels of the graph share its id; both join its stack.
	j.records(hdr(1, 1), []kernelRecord{rec(7, "g1", 3, true), rec(7, "g2", 4, true)}, t0)
	out := j.drain(t0, always)
	if len(out) != 2 || out[0].User[0] != 1 || out[1].User[0] != 1 {
		t.Fatalf("%+v", out)
	}
	j.drain(t0.Add(2*time.Minute), always)
	if j.launches.Len() != 0 || j.st.ExpiredLaunches != 1 || j.stacks.live() != 0 {
		t.Fatalf("after timeout: %d pending, %+v", j.launches.Len(), j.st)
	}
	// Too late for the graph: unsampled, not lost.
	j.records(hdr(1, 1), []kernelRecord{rec(7, "g1", 3, false)}, t0)
	if out := j.drain(t0.Add(3*time.Minute), always); len(out) != 1 || !out[0].Unsampled {
		t.Fatalf("%+v", out)
	}
}

func TestJoinNestedLaunchAlias(t *testing.T) {
	j := newJoiner(testLimits())
	j.launch(launchEv(1, 1, 10, "k", 0x1), t0)
	n := launchEv(1, 1, 11, "k", 0x5, 0x1)
	n.flags = FlagNested | FlagDriverAPI
	j.launch(n, t0)
	j.records(hdr(1, 1), []kernelRecord{rec(11, "k", 9, true)}, t0)
	if j.launches.Len() != 0 {
		t.Fatalf("alias of a completed launch still pending: %d", j.launches.Len())
	}
}

// Everything is per process: ids another process uses, names it
// announces, and a reused pid with a new start time start afresh.
func TestJoinIsolatesProcessesAndPidReuse(t *testing.T) {
	j := newJoiner(testLimits())
	j.name(nameEv(1, 1, "mine"))
	j.launch(launchEv(1, 1, 5, "mine", 0xaa), t0)
	// pid 2 claims the same correlation id, and pid 1 reused (start 2).
	j.records(hdr(2, 1), []kernelRecord{rec(5, "mine", 100, true)}, t0)
	j.records(hdr(1, 2), []kernelRecord{rec(5, "mine", 200, false)}, t0)
	j.records(hdr(1, 1), []kernelRecord{rec(5, "mine", 300, true)}, t0)
	out := j.drain(t0.Add(5*time.Second), always)
	for _, s := range out {
		switch {
		case s.Proc == procfs.ID{PID: 1, Start: 1} && s.GPUTime == 300:
			if s.User[0] != 0xaa || s.Kernel != "mine" {
				t.Errorf("%+v", s)
			}
		case s.GPUTime == 100 || s.GPUTime == 200:
			if !s.Unsampled || !strings.HasPrefix(s.Kernel, "[unknown kernel") {
				t.Errorf("foreign data leaked into %+v", s)
			}
		default:
			t.Errorf("unexpected %+v", s)
		}
	}
	if len(out) != 3 {
		t.Errorf("%d samples", len(out))
	}
}

func TestJoinBounds(t *testing.T) {
	lim := testLimits()
	j := newJoiner(lim)
	for cid := uint64(0); cid < 100; cid++ {
		j.launch(launchEv(1, 1, cid, "k", cid+1), t0)
	}
	if j.launches.Len() != lim.maxLaunchesPerProcess || j.st.EvictedLaunches != 100-uint64(lim.maxLaunchesPerProcess) {
		t.Errorf("per process: %d pending, %+v", j.launches.Len(), j.st)
	}
	for pid := 2; pid < 20; pid++ {
		j.launch(launchEv(pid, 1, 1, "k", 1), t0)
		for i := range 20 {
			j.name(nameEv(pid, 1, strings.Repeat("n", i+1)))
		}
		j.records(hdr(pid, 1), []kernelRecord{rec(9, "k", 1, true)}, t0)
	}
	if len(j.procs) > lim.maxProcesses || j.launches.Len() > lim.maxLaunches || j.heldList.Len() > lim.maxHeld {
		t.Errorf("bounds exceeded: %d procs, %d launches, %d held", len(j.procs), j.launches.Len(), j.heldList.Len())
	}
	for _, p := range j.procs {
		if len(p.names) > lim.maxNamesPerProcess {
			t.Errorf("%d names", len(p.names))
		}
	}
	if j.st.EvictedProcesses == 0 || j.st.DroppedNames == 0 {
		t.Errorf("%+v", j.st)
	}
	// Everything drains back to nothing once processes are gone.
	j.drain(t0, func(procfs.ID) bool { return false })
	j.drain(t0, func(procfs.ID) bool { return false })
	if len(j.procs) != 0 || j.launches.Len() != 0 || j.heldList.Len() != 0 || j.stacks.live() != 0 || j.nameBytes != 0 {
		t.Errorf("left: %d procs %d launches %d held %d stacks %d name bytes",
			len(j.procs), j.launches.Len(), j.heldList.Len(), j.stacks.live(), j.nameBytes)
	}
}

// An exited process: the drain that sees it idle and dead returns what it
// still had and forgets it; a live idle one is kept (names are announced
// once per process).
func TestJoinForgetsExitedProcesses(t *testing.T) {
	j := newJoiner(testLimits())
	j.name(nameEv(1, 1, "k"))
	j.name(nameEv(2, 1, "k"))
	j.records(hdr(1, 1), []kernelRecord{rec(1, "k", 5, true)}, t0) // held, launch never comes
	dead := func(k procfs.ID) bool { return k.PID != 1 }
	if out := j.drain(t0, dead); len(out) != 0 {
		t.Fatalf("active process drained early: %+v", out)
	}
	out := j.drain(t0, dead)
	if len(out) != 1 || out[0].GPUTime != 5 || !out[0].Unsampled || len(j.procs) != 1 || j.procs[procfs.ID{PID: 2, Start: 1}] == nil {
		t.Fatalf("%+v, procs %v", out, j.procs)
	}
}

func TestApportion(t *testing.T) {
	for _, tc := range []struct {
		total   uint64
		weights []uint64
		want    []uint64
	}{
		{10, []uint64{1, 1, 1}, []uint64{4, 3, 3}}, // ties: lower index first
		{1001, []uint64{30, 70}, []uint64{300, 701}},
		{0, []uint64{5, 5}, []uint64{0, 0}},
		{^uint64(0), []uint64{1, 1}, []uint64{1 << 63, 1<<63 - 1}},
		{7, []uint64{^uint64(0), ^uint64(0)}, []uint64{4, 3}}, // saturated weights
		{5, []uint64{0, 0}, nil},
	} {
		got := apportion(tc.total, tc.weights)
		if !slices.Equal(got, tc.want) {
			t.Errorf("apportion(%d, %v) = %v, want %v", tc.total, tc.weights, got, tc.want)
		}
	}
}

func TestParseName(t *testing.T) {
	mangled := "_ZN2at6native18elementwise_kernelILi128ELi4EEEviT1_"
	n, ok := parseName(nameIDOf([]byte(mangled)), []byte(mangled), false)
	if !ok || n.raw != mangled || n.demangled == "" {
		t.Fatalf("%+v %v", n, ok)
	}
	t.Logf("demangled: %q", n.demangled)
	if _, ok := parseName(12345, []byte("gemm"), false); ok {
		t.Error("accepted a name whose id is not its hash")
	}
	if _, ok := parseName(0, []byte("x"), true); ok {
		t.Error("accepted id 0")
	}
	bad := []byte{'a', 0xff, 0x1b, '[', '2', 'J', 0xc3}
	n, ok = parseName(nameIDOf(bad), bad, false)
	if !ok || n.raw != "a\uFFFD?[2J\uFFFD" {
		t.Errorf("sanitised %q", n.raw)
	}
	long := []byte(strings.Repeat("x", nameMax))
	if n, ok := parseName(999, long, true); !ok || !strings.HasSuffix(n.raw, "…") {
		t.Errorf("truncated name %q %v", n.raw, ok)
	}
}

func TestDecodeEvents(t *testing.T) {
	b := make([]byte, launchEventLen)
	le.PutUint32(b, uint32(markersEventKindEVENT_LAUNCH))
	le.PutUint32(b[4:], 42)
	le.PutUint64(b[8:], 1e9)
	le.PutUint64(b[16:], 7)
	le.PutUint64(b[24:], 8)
	le.PutUint32(b[32:], 43)
	le.PutUint32(b[36:], 1)
	le.PutUint32(b[40:], FlagDriverAPI)
	le.PutUint32(b[44:], 16)    // two frames
	le.PutUint64(b[48:], 0x500) // return address: not the second frame
	le.PutUint64(b[launchStackOff:], 0x100)
	le.PutUint64(b[launchStackOff+8:], 0x300)
	le.PutUint64(b[launchStackOff+16:], 0x777) // stale, beyond the two frames
	h, _ := decodeHeader(b)
	e, err := decodeLaunch(h, b)
	// The start time arrives in ns (start_boottime) and leaves in ticks.
	if err != nil || e.proc != (procfs.ID{PID: 42, Start: 100}) || e.correlationID != 7 || e.nameID != 8 || e.tid != 43 || e.device != 1 ||
		!slices.Equal(e.stack, []uint64{0x100, 0x500, 0x300}) || e.raw != nil || e.truncated {
		t.Fatalf("%+v %v", e, err)
	}
	// Interpreter frames, with a length beyond the array: clamped.
	le.PutUint32(b[launchInterpOff:], 1000)
	le.PutUint32(b[launchInterpOff+12:], 1) // kind
	le.PutUint64(b[launchInterpOff+16:], 0xc0de)
	le.PutUint64(b[launchInterpOff+16+16:], 42)
	le.PutUint32(b[60:], 3) // setup
	le.PutUint32(b[56:], unwindEndFrameLimit)
	if e, _ := decodeLaunch(h, b); e.raw == nil || int(e.raw.Len) != bpf.InterpStackFrames || e.raw.Kind != 1 || e.raw.Frames[0].Addr != 0xc0de || e.raw.Frames[0].Data != 42 || !e.truncated || e.setup != 3 {
		t.Errorf("interpreter frames %+v, truncated %v, setup %d", e.raw, e.truncated, e.setup)
	}
	le.PutUint32(b[56:], 0)
	le.PutUint64(b[48:], 0x300) // the kernel already had the caller
	if e, _ := decodeLaunch(h, b); !slices.Equal(e.stack, []uint64{0x100, 0x300}) {
		t.Errorf("%v", e.stack)
	}
	le.PutUint32(b[44:], uint32(0xfffffff2)) // -EFAULT
	if e, _ := decodeLaunch(h, b); !e.stackErr || e.stack != nil {
		t.Errorf("%+v", e)
	}
	le.PutUint32(b[44:], 1<<20) // more bytes than slots: bounded
	if _, err := decodeLaunch(h, b); err != nil {
		t.Error(err)
	}
	if _, err := decodeLaunch(h, b[:100]); err == nil {
		t.Error("short launch accepted")
	}

	r := make([]byte, recordsEvLen)
	le.PutUint32(r[16:], 2)
	le.PutUint64(r[24+56:], 99)   // second record's correlation id
	le.PutUint32(r[24+56+48:], 7) // sampled: any non-zero
	le.PutUint32(r[24+56+44:], 3) // gpu instance
	recs, err := decodeRecords(nil, r)
	if err != nil || len(recs) != 2 || recs[1].correlationID != 99 || !recs[1].sampled || recs[1].gpuInstance != 3 || recs[0].sampled {
		t.Fatalf("%+v %v", recs, err)
	}
	for _, n := range []uint32{0, 65, ^uint32(0)} {
		le.PutUint32(r[16:], n)
		if _, err := decodeRecords(nil, r); err == nil {
			t.Errorf("n=%d accepted", n)
		}
	}
	if (kernelRecord{startNs: 10, endNs: 5}).duration() != 0 {
		t.Error("negative duration")
	}

	nb := make([]byte, nameEventLen)
	le.PutUint32(nb[24:], 1000)
	le.PutUint32(nb[28:], nameMax)
	if e, err := decodeName(h, nb); err != nil || !e.partial || len(e.name) != nameMax {
		t.Errorf("%+v %v", e, err)
	}
	le.PutUint32(nb[28:], nameMax+1)
	if _, err := decodeName(h, nb); err == nil {
		t.Error("copied > max accepted")
	}
	le.PutUint32(nb[24:], 3)
	le.PutUint32(nb[28:], 4)
	if _, err := decodeName(h, nb); err == nil {
		t.Error("copied > len accepted")
	}
}

func TestLibraryMappings(t *testing.T) {
	maps := "7f00-7f10 r-xp 00000000 08:01 1234                       /usr/lib/libc.so.6\n" +
		"7f20-7f30 r--p 00000000 08:01 99   /opt/my dir/libslurmscope_inject.so.1 (deleted)\n" +
		"bad line\n"
	ms, _, err := procfs.ParseMaps(strings.NewReader(maps), isLibrary)
	if err != nil || len(ms) != 1 || ms[0].Path != "/opt/my dir/libslurmscope_inject.so.1" || !ms[0].Deleted || ms[0].Range() != "7f20-7f30" {
		t.Fatalf("%+v %v", ms, err)
	}
	for _, s := range []string{
		"7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libslurmscope_inject.so.bak.x\n", // matches: versioned
		"7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/notlibslurmscope_inject.so\n",
		"7f00-7f10 r-xp 00000000 00:00 0 [libslurmscope_inject.so]\n",
		"7f00-7f10 r-xp 00000000 00:00 0 /usr/lib/libslurmscope_inject.so\n", // no inode: not a file
	} {
		ms, _, _ := procfs.ParseMaps(strings.NewReader(s), isLibrary)
		if (len(ms) == 1) != strings.Contains(s, "bak") {
			t.Errorf("%q: %v", s, ms)
		}
	}
}

// The committed object must keep the layout the decoder reads.
func TestObjectLayout(t *testing.T) {
	if n := unsafe.Sizeof(markersLaunchEvent{}); n != uintptr(launchEventLen) {
		t.Errorf("launch event %d bytes, decoder expects %d", n, launchEventLen)
	}
	if n := unsafe.Sizeof(markersRecordsEvent{}); n != recordsEvLen {
		t.Errorf("records event %d bytes, decoder expects %d", n, recordsEvLen)
	}
	if n := unsafe.Sizeof(markersNameEvent{}); n != nameEventLen {
		t.Errorf("name event %d bytes, decoder expects %d", n, nameEventLen)
	}
	var se markersStateEvent
	if n := unsafe.Sizeof(se); n != stateEventLen || unsafe.Offsetof(se.KtimeNs) != 16 || unsafe.Offsetof(se.State) != 28 || unsafe.Offsetof(se.Reason) != 32 {
		t.Errorf("state event %d bytes, decoder expects %d", n, stateEventLen)
	}
	if n := unsafe.Sizeof(markersKernelRecord{}); n != recordSize {
		t.Errorf("record %d bytes", n)
	}
	var e markersLaunchEvent
	if off := unsafe.Offsetof(e.Stack); off != launchStackOff {
		t.Errorf("stack at %d, decoder reads %d", off, launchStackOff)
	}
	if off, n := unsafe.Offsetof(e.Interp), unsafe.Sizeof(e.Interp); off != uintptr(launchInterpOff) || n != uintptr(interpStackLen) || n != unsafe.Sizeof(bpf.InterpStack{}) {
		t.Errorf("interpreter frames at %d (%d bytes), decoder reads %d (%d)", off, n, launchInterpOff, interpStackLen)
	}
	if off := unsafe.Offsetof(e.StackEnd); off != 56 {
		t.Errorf("stack_end at %d", off)
	}
	if off := unsafe.Offsetof(e.Setup); off != 60 {
		t.Errorf("setup at %d", off)
	}
	spec, err := loadMarkers()
	if err != nil {
		t.Fatal(err)
	}
	if m := spec.Maps[markersMapStats]; m.MaxEntries != uint32(markersStatIndexSTAT_MAX) {
		t.Errorf("stats has %d entries", m.MaxEntries)
	}
	for _, p := range []string{markersProgKernelLaunch, markersProgKernelRecords, markersProgKernelName} {
		if lic := spec.Programs[p].License; lic != "Dual BSD/GPL" {
			t.Errorf("%s license %q: bpf_get_stack needs a GPL-compatible one", p, lic)
		}
	}
}

// TestJoinKeepsPythonFramesApart: one native stack (the eval loop) runs
// many Python stacks, and each kernel's time goes to the Python stack that
// launched it, with its frames.
func TestJoinKeepsPythonFramesApart(t *testing.T) {
	j := newJoiner(testLimits())
	j.name(nameEv(1, 5, "gemm"))
	fwd := []interp.Frame{{Function: "forward", File: "m.py", Line: 3, Entry: true}, {Function: "train", File: "m.py", Line: 9, Entry: true}}
	bwd := []interp.Frame{{Function: "backward", File: "m.py", Line: 5, Entry: true}, {Function: "train", File: "m.py", Line: 10, Entry: true}}
	for cid, py := range map[uint64][]interp.Frame{1: fwd, 2: fwd, 3: bwd} {
		e := launchEv(1, 5, cid, "gemm", 0xa, 0xb)
		e.interp = interp.Stack{Frames: py, Truncated: cid == 3}
		j.launch(e, t0)
	}
	j.records(hdr(1, 5), []kernelRecord{rec(1, "gemm", 10, true), rec(2, "gemm", 20, true), rec(3, "gemm", 70, true)}, t0)
	got := map[string]uint64{}
	for _, s := range j.drain(t0, always) {
		if !slices.Equal(s.User, []uint64{0xa, 0xb}) || len(s.Interp.Frames) != 2 || s.Interp.Truncated != (s.Interp.Frames[0].Function == "backward") {
			t.Errorf("sample %+v", s)
			continue
		}
		got[s.Interp.Frames[0].Function] += s.GPUTime
	}
	if got["forward"] != 30 || got["backward"] != 70 {
		t.Errorf("GPU time by Python function %v, want forward 30, backward 70", got)
	}
	if n := j.stacks.live(); n != 0 {
		t.Errorf("%d stacks left after the drain", n)
	}
}

// The library stepping aside for a process's own CUPTI client leaves no
// silent gap: each drain carries the wall time since, in the kernel's clock,
// under UntracedFrame; repeated states change nothing.
func TestJoinUntracedTime(t *testing.T) {
	j := newJoiner(testLimits())
	var mono uint64
	j.mono = func() uint64 { return mono }
	p := procfs.ID{PID: 10, Start: 1}
	ev := func(at uint64, aside bool) stateEvent {
		return stateEvent{header: header{proc: p}, ktimeNs: at, aside: aside, reason: reasonOtherSubscriber}
	}
	untraced := func(now uint64) uint64 {
		mono = now
		var ns uint64
		for _, s := range j.drain(time.Unix(0, 0), func(procfs.ID) bool { return true }) {
			if s.Untraced > 0 {
				if s.Proc != p || s.Kernel != UntracedFrame || s.GPUTime != 0 || s.Launches != 0 || s.User != nil {
					t.Errorf("untraced sample %+v", s)
				}
				ns += s.Untraced
			}
		}
		return ns
	}
	j.state(ev(1e9, false)) // tracing already: nothing
	j.state(ev(2e9, true))
	j.state(ev(2.5e9, true)) // aside again: still since 2 s
	j.state(ev(4e9, false))
	j.state(ev(4.5e9, false))
	if got := untraced(5e9); got != 2e9 {
		t.Errorf("first drain: %d ns untraced, want 2e9", got)
	}
	j.state(ev(6e9, true))
	if got := untraced(7e9); got != 1e9 {
		t.Errorf("aside across a drain: %d ns, want 1e9 up to the drain", got)
	}
	if got := untraced(9e9); got != 2e9 {
		t.Errorf("still aside: %d ns, want 2e9", got)
	}
	j.state(ev(9.5e9, false))
	if got := untraced(12e9); got != 0.5e9 {
		t.Errorf("back: %d ns, want 0.5e9", got)
	}
	if got := untraced(13e9); got != 0 {
		t.Errorf("tracing: %d ns, want 0", got)
	}
	// A clock that a hostile event puts backwards adds nothing.
	j.state(ev(20e9, true))
	j.state(ev(15e9, false))
	if got := untraced(21e9); got != 0 {
		t.Errorf("backwards: %d ns", got)
	}
	if j.st.StepAsides != 3 || j.st.Resumes != 3 {
		t.Errorf("step-asides %d, resumes %d; want 3, 3", j.st.StepAsides, j.st.Resumes)
	}
}

func TestDecodeState(t *testing.T) {
	h := header{kind: 4, proc: procfs.ID{PID: 7, Start: 1}}
	b := make([]byte, stateEventLen)
	le.PutUint64(b[16:], 123)
	le.PutUint32(b[24:], 8)
	le.PutUint32(b[28:], stateAside)
	le.PutUint32(b[32:], reasonOtherSubscriber)
	if e, err := decodeState(h, b); err != nil || !e.aside || e.ktimeNs != 123 || e.tid != 8 || e.reason != reasonOtherSubscriber || e.proc != h.proc {
		t.Errorf("%+v %v", e, err)
	}
	le.PutUint32(b[28:], stateTracing)
	if e, err := decodeState(h, b); err != nil || e.aside {
		t.Errorf("tracing: %+v %v", e, err)
	}
	le.PutUint32(b[28:], 7)
	if _, err := decodeState(h, b); err == nil {
		t.Error("state 7 accepted")
	}
	if _, err := decodeState(h, b[:stateEventLen-1]); err == nil {
		t.Error("short event accepted")
	}
}

// TestJoinKeepsRootFramesApart: launches from one stack under different
// NVTX ranges (interp.Stack.Root) are different stacks: each kernel's time
// sits under the ranges open at its launch.
func TestJoinKeepsRootFramesApart(t *testing.T) {
	j := newJoiner(testLimits())
	j.name(nameEv(1, 5, "gemm"))
	rangeFrames := func(names ...string) []symbolize.Frame {
		var out []symbolize.Frame
		for _, n := range names {
			out = append(out, symbolize.Frame{Function: n, Module: "[nvtx]"})
		}
		return out
	}
	for cid, root := range map[uint64][]symbolize.Frame{1: rangeFrames("[nvtx] fwd", "[nvtx] step"), 2: rangeFrames("[nvtx] fwd", "[nvtx] step"),
		3: rangeFrames("[nvtx] bwd", "[nvtx] step"), 4: nil} {
		e := launchEv(1, 5, cid, "gemm", 0xa, 0xb)
		e.interp = interp.Stack{Root: root}
		j.launch(e, t0)
	}
	j.records(hdr(1, 5), []kernelRecord{rec(1, "gemm", 10, true), rec(2, "gemm", 20, true), rec(3, "gemm", 70, true), rec(4, "gemm", 5, true)}, t0)
	got := map[string]uint64{}
	for _, s := range j.drain(t0, always) {
		k := "none"
		if len(s.Interp.Root) > 0 {
			k = s.Interp.Root[0].Function
		}
		got[k] += s.GPUTime
	}
	if got["[nvtx] fwd"] != 30 || got["[nvtx] bwd"] != 70 || got["none"] != 5 {
		t.Errorf("GPU time by innermost range %v, want fwd 30, bwd 70, none 5", got)
	}
}
