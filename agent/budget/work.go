package budget

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Work bounds how much of its files each job makes the agent read: a token
// bucket of bytes per owner. Memory alone does not bound work: a perf map
// replaced between two lookups is read again from scratch each time, and a
// job can map new files as fast as it likes. The bucket lets a job's
// startup read its libraries at once (Burst) and then Rate bytes a second;
// past that its files wait, unread and counted, until the bucket refills.
type Work struct {
	mu     sync.Mutex
	rate   float64 // bytes per second
	burst  float64
	now    func() time.Time
	owners map[string]*bucket
	denied uint64
}

type bucket struct {
	tokens float64
	at     time.Time
}

// ErrWorkLimit is returned by a read that the owner's bucket has no room
// for. The file is not broken: try again later.
var ErrWorkLimit = errors.New("job over its file read allowance")

// Defaults: a job may make the agent read 128 MiB of its symbol tables
// and perf maps at once (a large job's libraries at startup), then 4 MiB a
// second: about a tenth of a CPU core of parsing (perf maps parse at some
// 40 MiB/s), and a few seconds at most added to an interval that every
// job waits for.
const (
	DefaultWorkBurst = 128 << 20
	DefaultWorkRate  = 4 << 20
)

// WorkOptions size a Work. Zero values select the defaults; Now is the
// clock (tests).
type WorkOptions struct {
	Burst, Rate int64
	Now         func() time.Time
}

// NewWork returns a Work.
func NewWork(o WorkOptions) *Work {
	if o.Burst <= 0 {
		o.Burst = DefaultWorkBurst
	}
	if o.Rate <= 0 {
		o.Rate = DefaultWorkRate
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Work{rate: float64(o.Rate), burst: float64(o.Burst), now: o.Now, owners: map[string]*bucket{}}
}

// Take takes n bytes from owner's bucket, or reports false and takes
// nothing. A nil Work allows everything.
func (w *Work) Take(owner string, n int64) bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	b := w.owners[owner]
	if b == nil {
		if len(w.owners) >= 1<<14 {
			w.prune(now)
		}
		b = &bucket{tokens: w.burst, at: now}
		w.owners[owner] = b
	}
	b.refill(now, w.rate, w.burst)
	if float64(n) > b.tokens {
		w.denied++
		return false
	}
	b.tokens -= float64(n)
	return true
}

// Spend takes n bytes from owner's bucket whatever it holds, for work done
// before its size was known (a read of /proc): the bucket may go into debt,
// down to minus one burst, and later Takes wait for it to refill.
func (w *Work) Spend(owner string, n int64) {
	if w == nil || n <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	b := w.owners[owner]
	if b == nil {
		b = &bucket{tokens: w.burst, at: now}
		w.owners[owner] = b
	}
	b.refill(now, w.rate, w.burst)
	b.tokens = max(b.tokens-float64(n), -w.burst)
}

func (b *bucket) refill(now time.Time, rate, burst float64) {
	if d := now.Sub(b.at).Seconds(); d > 0 {
		b.tokens = min(burst, b.tokens+d*rate)
	}
	b.at = now
}

// prune forgets full buckets: they are what a new one would be.
func (w *Work) prune(now time.Time) {
	for k, b := range w.owners {
		b.refill(now, w.rate, w.burst)
		if b.tokens >= w.burst {
			delete(w.owners, k)
		}
	}
}

// Denied is the number of reads refused since NewWork.
func (w *Work) Denied() uint64 {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.denied
}

// ReaderAt charges every read through r to owner; once the bucket is empty
// reads fail with ErrWorkLimit (and Denied says so, for parsers that do not
// pass read errors on). With a nil Work it only passes reads on.
func (w *Work) ReaderAt(owner string, r io.ReaderAt) *WorkReader {
	return &WorkReader{w: w, owner: owner, r: r}
}

// WorkReader is an io.ReaderAt charged to an owner's bucket.
type WorkReader struct {
	w      *Work
	owner  string
	r      io.ReaderAt
	denied atomic.Bool
	// OnRead, when set, is called after each read (a guard's progress).
	OnRead func()
}

var _ io.ReaderAt = (*WorkReader)(nil)

// ReadAt implements io.ReaderAt.
func (wr *WorkReader) ReadAt(p []byte, off int64) (int, error) {
	if !wr.w.Take(wr.owner, int64(len(p))) {
		wr.denied.Store(true)
		return 0, ErrWorkLimit
	}
	n, err := wr.r.ReadAt(p, off)
	if wr.OnRead != nil {
		wr.OnRead()
	}
	return n, err
}

// Denied reports whether a read was refused.
func (wr *WorkReader) Denied() bool { return wr.denied.Load() }
