package cpu

import (
	"encoding/binary"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// stackBits is how many levels burnStacks recurses through, choosing one of
// two functions at each: 2^stackBits distinct user stacks.
const stackBits = 11

// burnStacks spins forever through 2048 distinct call stacks, a few
// microseconds in each, in an order unrelated to the sampling period: every
// sample lands on a stack picked almost at random.
func burnStacks() {
	fmt.Println("ready")
	x := uint64(1)
	for i := uint64(0); ; i++ {
		// Multiplying by an odd constant permutes the paths.
		path := (i * 0x9e3779b97f4a7c15) >> (64 - stackBits)
		x = stackLeft(path, stackBits, x)
	}
}

// stackLeft and stackRight are the two ways down: which one each level
// called is what makes the stacks differ.
//
//go:noinline
func stackLeft(path uint64, depth int, x uint64) uint64 {
	switch {
	case depth == 0:
		return stackLeaf(x)
	case path&1 == 0:
		return stackLeft(path>>1, depth-1, x+1)
	default:
		return stackRight(path>>1, depth-1, x+2)
	}
}

//go:noinline
func stackRight(path uint64, depth int, x uint64) uint64 {
	switch {
	case depth == 0:
		return stackLeaf(x)
	case path&1 == 0:
		return stackLeft(path>>1, depth-1, x+3)
	default:
		return stackRight(path>>1, depth-1, x+4)
	}
}

//go:noinline
func stackLeaf(x uint64) uint64 {
	for range 2000 {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// stacksTestRate samples ten times as often as the default, to see many
// distinct stacks in a few seconds.
const stacksTestRate = 997

// waitBurnerSamples sleeps until the burner has had CPU time for about want
// samples at stacksTestRate, or max has passed, or stop returns true.
func waitBurnerSamples(t *testing.T, pid int, want float64, max time.Duration, stop func() bool) {
	t.Helper()
	start := procStat(t, pid)
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
		cur := procStat(t, pid)
		ticks := cur[14] + cur[15] - start[14] - start[15]
		if float64(ticks)/userHZ*stacksTestRate >= want || (stop != nil && stop()) {
			return
		}
	}
}

// mapLen counts the keys of a map.
func mapLen(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var n int
	var key any
	for {
		next, err := m.NextKeyBytes(key)
		if err != nil {
			t.Fatal(err)
		}
		if next == nil {
			return n
		}
		n++
		key = next
	}
}

func stackString(user bool, frames []uint64) string {
	b := make([]byte, 1, 1+8*len(frames))
	if user {
		b[0] = 'u'
	}
	for _, pc := range frames {
		b = binary.LittleEndian.AppendUint64(b, pc)
	}
	return string(b)
}

// refStackHash is stack_hash of sampler.bpf.c, written again in Go.
func refStackHash(seed uint64, user bool, frames []uint64) uint64 {
	mix64 := func(x uint64) uint64 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		return x
	}
	domain := uint64(0x6b65726e656c0000) // "kernel"
	if user {
		domain = 0x7573657200000000 // "user"
	}
	h := mix64(seed ^ domain ^ uint64(len(frames)))
	for _, pc := range frames {
		h = mix64(h ^ pc)
	}
	if h == 0 {
		h = 1
	}
	return h
}

// checkStackKeys checks the keys of the live generation's stacks against
// refStackHash: a program that hashed fewer frames than it stores, or mixed
// up the domains, would merge different stacks without any counter showing
// it. Stacks are never changed once stored, so reading them live is safe.
// Only stacks that are all user frames of the burner's executable mappings
// (other Go programs share them) or all kernel frames are checked.
func checkStackKeys(t *testing.T, s *Sampler, maps []mapping) {
	t.Helper()
	var (
		key             uint64
		st              bpf.UnwindStack
		checked, wrong  int
		zeroTail        int
		kernel, user    int
		sawZeroKey      bool
		allIn, allAbove bool
	)
	it := s.gens[s.flip.Active()].stacks.Iterate()
	for it.Next(&key, &st) {
		if key == 0 {
			sawZeroKey = true
		}
		frames, _ := stackFrames(&st)
		n := len(frames)
		if n == 0 {
			continue
		}
		if frames[n-1] == 0 {
			zeroTail++ // a thread's outermost return address
		}
		allIn, allAbove = true, true
		for _, pc := range frames {
			allIn = allIn && (pc == 0 || inMappings(maps, pc))
			allAbove = allAbove && (pc == 0 || pc>>63 == 1)
		}
		if !allIn && !allAbove {
			continue
		}
		checked++
		if allIn {
			user++
		} else {
			kernel++
		}
		if want := refStackHash(s.hashSeed, allIn, frames); key != want {
			wrong++
			if wrong <= 5 {
				t.Errorf("stack of %d frames (user %v) has key %#x, want %#x: %#x", len(frames), allIn, key, want, frames)
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("checked the keys of %d stacks (%d user, %d kernel; %d ending in zero frames): %d wrong", checked, user, kernel, zeroTail, wrong)
	if sawZeroKey {
		t.Error("a stack is stored under key 0, which means no stack")
	}
	if user < 50 {
		t.Errorf("only %d of the burner's user stacks to check", user)
	}
}

// checkDrained checks that the generation a Drain just read is empty again,
// stacks included: nothing drained is left behind, and stacks whose counts
// were lost are freed too.
func checkDrained(t *testing.T, s *Sampler, drain int) {
	t.Helper()
	g := s.gens[1-s.flip.Active()]
	for _, m := range []*ebpf.Map{g.counts, g.stacks, g.interp} {
		if n := mapLen(t, m); n != 0 {
			t.Errorf("drain %d left %d entries in %s", drain, n, m)
		}
	}
}

// TestIntegrationManyStacks samples a process that runs through 2048
// distinct stacks. A STACK_TRACE map loses every sample of a stack whose
// hash bucket another stack holds: with hundreds of distinct stacks in a
// map of 16384 buckets, some always collide (the test logs how many
// colliding pairs that map would expect). No sample may lose its stack
// while the hash map is not full, and the test stops sampling before the
// map is half full.
func TestIntegrationManyStacks(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	s, err := New(Options{SampleRate: stacksTestRate, ExcludePID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	b := startBurnerMode(t, "stacks")
	startTicks := procStat(t, b.pid)[22]
	waitBurnerSamples(t, b.pid, 1500, 10*time.Second, func() bool {
		return mapLen(t, s.gens[s.flip.Active()].stacks) >= s.stackEntries/2
	})
	maps := execMappings(t, b.pid)
	checkStackKeys(t, s, maps)

	// Drained while the burner still runs: a process that is exiting has no
	// user stack left to read, which is an error but not this test's.
	samples, stats, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	t.Logf("stats: %+v", stats)
	checkDrained(t, s, 1)

	var total, withUser, drained uint64
	distinct := map[string]bool{}
	for _, sm := range samples {
		drained += sm.Count
		if sm.Proc.PID != b.pid || sm.Proc.Start != startTicks {
			continue
		}
		total += sm.Count
		if len(sm.User) == 0 {
			continue
		}
		withUser += sm.Count
		distinct[stackString(true, sm.User)] = true
		if !inMappings(maps, sm.User[0]) {
			t.Errorf("user leaf %#x outside the burner's executable mappings", sm.User[0])
		}
	}
	d, n := float64(len(distinct)), float64(s.stackEntries)
	t.Logf("burner: %d samples, %d with a user stack, %d distinct user stacks; a STACK_TRACE map of %d buckets would expect %.1f colliding pairs among them alone",
		total, withUser, len(distinct), s.stackEntries, d*(d-1)/(2*n))
	if stats.KernelStackMapFull != 0 || stats.UserStackMapFull != 0 {
		t.Errorf("stacks map full, but it was far from full: %+v", stats)
	}
	if withUser != total || total == 0 {
		t.Errorf("%d of %d burner samples lost their user stack", total-withUser, total)
	}
	// Enough distinct stacks that a STACK_TRACE map would have lost some
	// for certain (e^-pairs is the chance of no collision at all).
	if d*(d-1)/(2*n) < 5 {
		t.Errorf("only %d distinct burner stacks (is the machine too busy to run the burner?); the test needs more to show anything", len(distinct))
	}
	if stats.Samples != drained || stats.MissingStacks != 0 || stats.LostMapFull != 0 {
		t.Errorf("drained %d samples: %+v", drained, stats)
	}
}

// TestIntegrationStackMapFull makes the stacks map far too small: stacks
// that find it full are counted as such, their samples are kept without the
// stack, and a drain frees the map for the next round of that generation.
func TestIntegrationStackMapFull(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root, testenv.BTF)
	const entries = 64
	s, err := New(Options{SampleRate: stacksTestRate, MaxStackEntries: entries, ExcludePID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	b := startBurnerMode(t, "stacks")
	startTicks := procStat(t, b.pid)[22]
	burner := func(samples []Sample) (total, noUser uint64) {
		for _, sm := range samples {
			if sm.Proc.PID == b.pid && sm.Proc.Start == startTicks {
				total += sm.Count
				if len(sm.User) == 0 {
					noUser += sm.Count
				}
			}
		}
		return total, noUser
	}

	var prev Stats
	for drain := 1; drain <= 3; drain++ {
		waitBurnerSamples(t, b.pid, 400, 3*time.Second, nil)
		samples, stats, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		checkDrained(t, s, drain)

		var drained uint64
		distinct := map[string]bool{}
		for _, sm := range samples {
			drained += sm.Count
			if len(sm.Kernel) > 0 {
				distinct[stackString(false, sm.Kernel)] = true
			}
			if len(sm.User) > 0 {
				distinct[stackString(true, sm.User)] = true
			}
		}
		total, noUser := burner(samples)
		full := stats.UserStackMapFull - prev.UserStackMapFull
		errs := stats.UserStackErrors - prev.UserStackErrors
		t.Logf("drain %d: %d samples, %d distinct stacks; burner: %d samples, %d without user stack; user stack map full %d, errors %d; kernel stack map full %d",
			drain, drained, len(distinct), total, noUser, full, errs, stats.KernelStackMapFull-prev.KernelStackMapFull)

		// Samples are never dropped for a full stacks map.
		if drained != stats.Samples-prev.Samples || stats.LostMapFull != 0 {
			t.Errorf("drain %d returned %d samples, counters grew by %d: %+v", drain, drained, stats.Samples-prev.Samples, stats)
		}
		if len(distinct) > entries {
			t.Errorf("drain %d: %d distinct stacks from a map of %d", drain, len(distinct), entries)
		}
		// Every burner sample without its user stack is accounted for.
		if total == 0 || noUser == 0 || noUser > full+errs {
			t.Errorf("drain %d: %d of %d burner samples without a user stack, %d counted as map full and %d as errors",
				drain, noUser, total, full, errs)
		}
		// The map is full, not broken: a drain empties it, and the next
		// round of each generation stores stacks again.
		if noUser == total {
			t.Errorf("drain %d: no burner sample has its user stack", drain)
		}
		if stats.LostStackErrors != stats.KernelStackMapFull+stats.KernelStackErrors+stats.UserStackMapFull+stats.UserStackErrors {
			t.Errorf("LostStackErrors is not the sum of its parts: %+v", stats)
		}
		prev = stats
	}
}
