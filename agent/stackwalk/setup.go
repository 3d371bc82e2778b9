package stackwalk

import (
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/promschema"
	"github.com/slurmscope/slurmscope/schema"
)

// What of a process's set-up the histogram times.
const (
	partTables      = "unwind_tables"
	partInterpreter = "interpreter"
)

// setupClock times how long after its start each process was set up:
// until then its samples lack callers (no tables) or interpreter frames.
// It reads CLOCK_BOOTTIME, the clock of the kernel's start times.
type setupClock struct {
	hist  *prometheus.HistogramVec
	since uint64 // when the Walker started: processes started before are not timed
	now   func() uint64
}

func newSetupClock() *setupClock {
	c := &setupClock{hist: promschema.HistogramVec(schema.AgentProcessSetup), now: boottime}
	c.since = c.now()
	return c
}

func boottime() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano()) // #nosec G115 -- CLOCK_BOOTTIME is never negative
}

// observe times the set-up of part for a process started at startNs.
func (c *setupClock) observe(part string, startNs uint64) {
	now := c.now()
	if startNs < c.since || now < startNs {
		return
	}
	c.hist.WithLabelValues(part).Observe(float64(now-startNs) / 1e9)
}
