package python

import "time"

// Resolving a job's frames costs the agent reads of the job's memory and
// CPU time (code objects read, line tables decoded, frames looked up),
// which a job can make as large as it likes: deep stacks through functions
// with huge code objects, a new code object faked in every sample. Each
// job has an allowance of both, refilled at a rate up to a burst; a job
// past it gets its frames unresolved (counted) until it refills, and the
// other jobs' frames do not wait for it.

// jobMeter is one job's allowance. Guarded by the tracker's lock.
type jobMeter struct {
	bytes, time bucket
	procs       int // processes of the job the tracker holds
}

// bucket is a token bucket of float units (bytes, seconds).
type bucket struct {
	level float64
	at    time.Time
}

// refill brings the bucket to now; a new one starts full.
func (b *bucket) refill(now time.Time, rate, burst float64) {
	if b.at.IsZero() {
		b.level = burst
	} else if d := now.Sub(b.at).Seconds(); d > 0 {
		b.level = min(burst, b.level+rate*d)
	}
	b.at = now
}

// take takes n if the bucket holds it.
func (b *bucket) take(n float64) bool {
	if b.level < n {
		return false
	}
	b.level -= n
	return true
}

// charge takes n whatever the bucket holds, for work done before its cost
// was known; the debt is bounded by one burst.
func (b *bucket) charge(n, burst float64) { b.level = max(b.level-n, -burst) }

// Allowance defaults: 4 MiB a second of reads with four seconds' burst (a
// job's start, when every code object is new), and 50 ms of CPU a second
// (5% of a core) with four seconds' burst. A job's drain with every code
// object cached costs microseconds a stack.
const (
	defaultReadBytesPerSecond   = 4 << 20
	defaultResolveTimePerSecond = 50 * time.Millisecond
	meterBurstSeconds           = 4
)

func (t *Tracker) meterOf(owner string) *jobMeter {
	m := t.jobs[owner]
	if m == nil {
		m = &jobMeter{}
		t.jobs[owner] = m
	}
	return m
}

// takeBytes takes n bytes from the job's read allowance.
func (t *Tracker) takeBytes(m *jobMeter, n float64) bool {
	rate := float64(t.o.ReadBytesPerSecond)
	m.bytes.refill(t.o.Now(), rate, meterBurstSeconds*rate)
	return m.bytes.take(n)
}

// chargeBytes charges n bytes read beyond what was taken.
func (t *Tracker) chargeBytes(m *jobMeter, n float64) {
	rate := float64(t.o.ReadBytesPerSecond)
	m.bytes.refill(t.o.Now(), rate, meterBurstSeconds*rate)
	m.bytes.charge(n, meterBurstSeconds*rate)
}

// timeLeft reports whether the job may spend time on resolving now.
func (t *Tracker) timeLeft(m *jobMeter) bool {
	rate := t.o.ResolveTimePerSecond.Seconds()
	m.time.refill(t.o.Now(), rate, meterBurstSeconds*rate)
	return m.time.level > 0
}

// chargeTime charges d of resolving to the job.
func (t *Tracker) chargeTime(m *jobMeter, d time.Duration) {
	rate := t.o.ResolveTimePerSecond.Seconds()
	m.time.refill(t.o.Now(), rate, meterBurstSeconds*rate)
	m.time.charge(max(d, 0).Seconds(), meterBurstSeconds*rate)
}
