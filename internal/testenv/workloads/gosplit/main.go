// Command gosplit burns N seconds of CPU time (the first argument, default
// 10) in two functions with a known split of CPU time: main.hotA 75 % and
// main.hotB 25 % of the time the two spend. Both run the same loop and
// hotA does three times hotB's iterations per round; see cpusplit.c for
// why the split is made by work and not by reading a clock, why the
// rounds vary in length, and why they are short.
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A round's hotB iterations are drawn from [minIters, minIters+spanIters).
const (
	minIters  = 20_000
	spanIters = 160_000
)

// sink is global so that the loops' work is observable and cannot be
// optimised away.
var sink uint64

// burn is inlined into both hot functions, so that their loops are the
// same instructions.
func burn(n uint64) {
	for i := uint64(0); i < n; i++ {
		sink += i ^ sink>>3
	}
}

//go:noinline
func hotA(n uint64) { burn(3 * n) }

//go:noinline
func hotB(n uint64) { burn(n) }

func main() {
	secs := 10.0
	if len(os.Args) > 1 {
		v, err := strconv.ParseFloat(os.Args[1], 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "usage: gosplit [seconds]")
			os.Exit(2)
		}
		secs = v
	}
	end := cpuTime() + time.Duration(secs*float64(time.Second))
	rounds := 0
	for cpuTime() < end {
		n := minIters + rand.Uint64N(spanIters) // #nosec G404 -- a test workload's varying loop count; nothing depends on its unpredictability
		hotA(n)
		hotB(n)
		rounds++
	}
	fmt.Printf("gosplit: %d rounds in %.1f s of CPU (sink %d)\n", rounds, secs, sink)
}

// cpuTime is the CPU time the process has used: a busy host slows the
// workload down but leaves it the samples it is owed.
func cpuTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}
