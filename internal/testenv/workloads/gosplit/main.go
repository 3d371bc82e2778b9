// Command gosplit burns one CPU for N seconds (the first argument, default
// 10) in two functions with a known split of CPU time: main.hotA 75 % and
// main.hotB 25 % of the time the two spend. Both run the same loop and
// hotA does three times hotB's iterations per round; see cpusplit.c for
// why the split is made by work and not by reading a clock, and why the
// rounds vary in length.
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"
)

// A round's hotB iterations are drawn from [minIters, minIters+spanIters).
const (
	minIters  = 200_000
	spanIters = 1_600_000
)

// sink is global so that the loops' work is observable and cannot be
// optimised away.
var sink uint64

//go:noinline
func hotA(n uint64) {
	for i := uint64(0); i < 3*n; i++ {
		sink += i ^ sink>>3
	}
}

//go:noinline
func hotB(n uint64) {
	for i := uint64(0); i < n; i++ {
		sink += i ^ sink>>3
	}
}

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
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	rounds := 0
	for time.Now().Before(end) {
		n := minIters + rand.Uint64N(spanIters) // #nosec G404 -- a test workload's varying loop count; nothing depends on its unpredictability
		hotA(n)
		hotB(n)
		rounds++
	}
	fmt.Printf("gosplit: %d rounds in %.1f s (sink %d)\n", rounds, secs, sink)
}
