// Package ship delivers an on-disk spool to one backend, oldest entry first.
// Pyroscope pushes and remote-write requests go through the same loop; each
// backend supplies only a Sender: how to decode a spooled entry and how to
// send it once, with its failures classified (see Error), and takes its
// spool's flags with SpoolFlags.
//
// A retryable failure holds the queue (head-of-line) and the head is retried
// with capped, jittered exponential backoff, or after the server's
// Retry-After when that is longer, so data arrives in order. A permanent
// failure drops that one entry and counts it under its reason. Stopping has
// two steps: soft (no more waiting or retrying; what is queued is flushed
// until the first failure) and hard (the request in flight is abandoned) a
// flush timeout later. What is not delivered stays in the spool for the next
// start. Delivery is exactly-once while the agent runs and at-least-once
// across a crash (see package spool).
package ship

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/spool"
)

// Drop reasons the shipper itself counts, as exported in the reason label.
// A Sender may drop under reasons of its own (see Drop).
const (
	DropRejected   = "rejected"    // the backend refused the request (a permanent failure)
	DropSpoolFull  = "spool_full"  // evicted from the full spool to make room for newer data
	DropCorrupt    = "corrupt"     // a spool entry that could not be read or decoded
	DropTooLarge   = "too_large"   // a request bigger than the whole spool
	DropSpoolWrite = "spool_write" // the spool could not store the request (disk error)
)

// Reasons lists the drop reasons every shipper can count.
var Reasons = []string{DropRejected, DropSpoolFull, DropCorrupt, DropTooLarge, DropSpoolWrite}

// Sender is one backend: how a spooled entry becomes a request, and how a
// request is sent once. Both are called from the shipper's one goroutine.
type Sender[R any] interface {
	// Decode turns a spooled payload into a request, once per entry however
	// often the request is sent, and says what it counts for once delivered.
	// An error drops the entry without sending it: under its reason for an
	// error made by Drop (a profile older than the server accepts, say),
	// as DropCorrupt otherwise.
	Decode(payload []byte) (R, Size, error)
	// Send sends req once; nil is delivered. A failure that is an *Error
	// says whether to retry, why, and when; any other error is retried.
	// Send may also decide before sending that req must go: a permanent
	// *Error (Drop) drops it under its reason.
	Send(ctx context.Context, req R) error
}

// Size is what a delivered request adds to Stats.
type Size struct {
	Bytes   int // sent bytes
	Samples int // samples, where the protocol counts them
}

// Error is a failed send, classified for the shipper.
type Error struct {
	// Op names what failed in the message: "pyroscope push", "remote write".
	Op string
	// Retryable says the same request may succeed later: the backend is
	// down, overloaded or timed out, or the credentials are wrong and may
	// be fixed. Otherwise the request itself is at fault and is dropped.
	Retryable bool
	// Reason is a short, stable word: "unavailable", "timeout",
	// "rate_limited", "auth" for retries (logged); for a permanent failure
	// it is the drop reason counted ("rejected" when empty).
	Reason string
	// HTTPStatus is the response's status, 0 if none came back.
	HTTPStatus int
	// RetryAfter is the backend's Retry-After, when it sent one.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	op := e.Op
	if op == "" {
		op = "send"
	}
	if e.HTTPStatus != 0 {
		return fmt.Sprintf("%s failed (%s, %s, HTTP %d): %v", op, kind, e.Reason, e.HTTPStatus, e.Err)
	}
	return fmt.Sprintf("%s failed (%s, %s): %v", op, kind, e.Reason, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Drop is the error with which a Sender drops a request before sending it,
// counted under reason.
func Drop(reason string, err error) *Error { return &Error{Reason: reason, Err: err} }

// IsRetryable reports whether err is worth retrying. Errors that are not
// classified are retryable: keeping data is the safe default.
func IsRetryable(err error) bool {
	var se *Error
	if errors.As(err, &se) {
		return se.Retryable
	}
	return err != nil
}

// Options configures a Shipper.
type Options struct {
	// Name is the backend in log lines ("pyroscope", "remote write");
	// What is what it carries ("profiles", "metrics").
	Name, What string
	// Log defaults to slog.Default().
	Log *slog.Logger
	// MinBackoff and MaxBackoff bound the delay between retries of the
	// head request; MaxBackoff also caps Retry-After.
	MinBackoff, MaxBackoff time.Duration
	// FlushTimeout bounds the stop: after Run's context is done, what is
	// queued is delivered until the first failure or for this long,
	// whichever comes first. Zero or negative: no flush, and the request
	// in flight is abandoned at once.
	FlushTimeout time.Duration
	// After is how the shipper waits between retries; nil is time.After.
	// Tests record the delays with it instead of measuring them.
	After func(time.Duration) <-chan time.Time
	// LogEvery is how often an error that keeps coming back (the backend
	// down, a drop) is logged again, with its count; default
	// logx.DefaultEvery. Now is the clock it is judged by (tests).
	LogEvery time.Duration
	Now      func() time.Time
}

// Shipper moves entries from a spool to a Sender. Create one with New.
type Shipper[R any] struct {
	spool  *spool.Spool
	sender Sender[R]
	log    *slog.Logger
	name   string
	what   string

	backoffMin, backoffMax time.Duration
	flushTimeout           time.Duration
	after                  func(time.Duration) <-chan time.Time

	mu          sync.Mutex
	sent        uint64
	sentBytes   uint64
	sentSamples uint64
	retries     uint64
	dropped     map[string]uint64
	limit       *logx.Limiter // errors: logged when new, then now and then
	failing     bool          // the head request's last attempt failed
	lastErr     string
}

// New ships from sp through snd. The spool must be this shipper's own: it
// expects one consumer.
func New[R any](sp *spool.Spool, snd Sender[R], o Options) *Shipper[R] {
	s := &Shipper[R]{
		spool: sp, sender: snd, log: o.Log, name: o.Name, what: o.What,
		backoffMin: o.MinBackoff, backoffMax: o.MaxBackoff, flushTimeout: o.FlushTimeout,
		after:   o.After,
		dropped: map[string]uint64{},
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.limit = logx.NewLimiter(s.log, logx.Options{Every: o.LogEvery, Now: o.Now})
	if s.after == nil {
		s.after = time.After
	}
	if s.backoffMin <= 0 {
		s.backoffMin = time.Millisecond
	}
	s.backoffMax = max(s.backoffMax, s.backoffMin)
	return s
}

// Enqueue spools payload for shipping. A payload the spool cannot take is
// counted as dropped (too_large, spool_full, spool_write) and returned as an
// error.
func (s *Shipper[R]) Enqueue(payload []byte) error {
	err := s.spool.Append(payload)
	switch {
	case err == nil:
	case errors.Is(err, spool.ErrTooLarge):
		s.Discard(DropTooLarge, err)
	case errors.Is(err, spool.ErrFull):
		s.Discard(DropSpoolFull, err)
	default: // a disk error, or the spool was closed under us
		s.Discard(DropSpoolWrite, err)
	}
	return err
}

// Discard counts a request dropped under reason, for producers that drop
// before spooling (a request that fails validation).
func (s *Shipper[R]) Discard(reason string, err error) {
	s.mu.Lock()
	s.dropped[reason]++
	s.mu.Unlock()
	s.LogError("drop:"+reason, "dropping "+s.what, err, "reason", reason)
}

// LogError logs an error under key when it is new, and then at most every
// Options.LogEvery with how often it came back (logx.Limiter): a
// misbehaving producer or backend must not flood the log. The counters
// carry the rest.
func (s *Shipper[R]) LogError(key, msg string, err error, args ...any) {
	s.limit.Error(key, s.name+": "+msg, err, args...)
}

// Run ships until ctx is done, then stops in two steps (see the package
// documentation) and returns nil. It returns an error if the spool fails
// under it. Run may be called once.
func (s *Shipper[R]) Run(ctx context.Context) error {
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()
	go func() {
		select {
		case <-hard.Done(): // Run returned
			return
		case <-ctx.Done():
		}
		if s.flushTimeout > 0 {
			// Cutting the request in flight short at once would often cut
			// it after the backend stored it, and the flush would then
			// send it twice.
			t := time.NewTimer(s.flushTimeout)
			defer t.Stop()
			select {
			case <-hard.Done():
				return
			case <-t.C:
			}
		}
		stopHard()
	}()

	for ctx.Err() == nil {
		e, err := s.spool.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("%s spool: %w", s.name, err)
		}
		if !s.deliver(ctx, hard, e) {
			break
		}
	}
	// Stopping: one attempt per entry, until the first failure.
	for s.flushTimeout > 0 && hard.Err() == nil {
		e, err := s.spool.Peek()
		if err != nil || !s.deliver(ctx, hard, e) {
			break
		}
	}
	return nil
}

// deliver sends e until it is delivered or dropped (true), or the shipper
// is stopping and e failed (false; e stays queued). Once soft is done it
// makes one attempt.
func (s *Shipper[R]) deliver(soft, hard context.Context, e spool.Entry) bool {
	req, size, err := s.sender.Decode(e.Payload)
	if err != nil {
		s.drop(e.Seq, DropCorrupt, fmt.Errorf("spool entry %d: %w", e.Seq, err))
		return true
	}
	for attempt := 0; ; attempt++ {
		began := time.Now()
		err := s.sender.Send(hard, req)
		if err == nil {
			s.delivered(e.Seq, size)
			s.debugDelivered(req, size, attempt+1, time.Since(began))
			return true
		}
		if hard.Err() != nil {
			return false
		}
		if !IsRetryable(err) {
			s.drop(e.Seq, DropRejected, err)
			return true
		}
		if soft.Err() != nil {
			return false
		}
		select {
		case <-soft.Done():
			return false
		case <-s.after(s.retryDelay(attempt, err)):
		}
	}
}

// retryDelay counts a failed attempt and returns the delay before the next:
// the backoff, or the backend's Retry-After when it asks for longer.
func (s *Shipper[R]) retryDelay(attempt int, err error) time.Duration {
	s.mu.Lock()
	s.retries++
	s.failing = true
	s.lastErr = logx.Err(err)
	s.mu.Unlock()
	// Not once per retry: when new, then now and then with the count.
	s.limit.Warn("send", s.name+" unavailable; keeping "+s.what+" in the spool and retrying", err)
	d := s.backoff(attempt)
	var se *Error
	if errors.As(err, &se) && se.RetryAfter > d {
		d = min(se.RetryAfter, s.backoffMax)
	}
	return d
}

// backoff is the delay before retry attempt+1: exponential from backoffMin,
// capped at backoffMax, with "equal jitter" (half fixed, half random) so a
// cluster of agents does not retry in lockstep after an outage.
func (s *Shipper[R]) backoff(attempt int) time.Duration {
	d := s.backoffMin
	for i := 0; i < attempt && d < s.backoffMax; i++ {
		d *= 2
	}
	d = min(d, s.backoffMax)
	half := d / 2
	return half + rand.N(half+1) // #nosec G404 -- retry jitter only spreads agents' retries; it needs no unpredictability
}

func (s *Shipper[R]) delivered(seq uint64, n Size) {
	s.ack(seq)
	s.mu.Lock()
	s.sent++
	s.sentBytes += uint64(n.Bytes)     // #nosec G115 -- a size, never negative
	s.sentSamples += uint64(n.Samples) // #nosec G115 -- a count, never negative
	recovered := s.failing
	s.failing, s.lastErr = false, ""
	s.mu.Unlock()
	if recovered {
		s.limit.OK("send", s.name+" reachable again; delivering the spool")
	}
}

// debugDelivered logs a delivered request at debug level: its size, the
// attempts it took, how long the last one took, and what the request says
// of itself when it is a slog.LogValuer (a push names its jobs).
func (s *Shipper[R]) debugDelivered(req R, n Size, attempts int, took time.Duration) {
	ctx := context.Background()
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("backend", s.name)}
	if v, ok := any(req).(slog.LogValuer); ok {
		attrs = append(attrs, slog.Attr{Value: slog.AnyValue(v).Resolve()}) // a group without a key: inline
	}
	attrs = append(attrs, slog.Int("bytes", n.Bytes), slog.Int("attempts", attempts), slog.Duration("took", took.Round(time.Microsecond)))
	if n.Samples > 0 {
		attrs = append(attrs, slog.Int("samples", n.Samples))
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, "delivered "+s.what, attrs...)
}

// drop removes entry seq, counted under the reason of err when it is an
// *Error that has one, under def otherwise.
func (s *Shipper[R]) drop(seq uint64, def string, err error) {
	reason := def
	var se *Error
	if errors.As(err, &se) && se.Reason != "" {
		reason = se.Reason
	}
	s.Discard(reason, err)
	s.ack(seq)
}

func (s *Shipper[R]) ack(seq uint64) {
	if err := s.spool.Ack(seq); err != nil {
		s.log.Error(s.name+" spool: ack failed; the entry will be sent again", "seq", seq, "err", err)
	}
}

// Stats is a snapshot of a shipper's and its spool's counters.
type Stats struct {
	Sent        uint64 // requests delivered
	SentBytes   uint64 // Size.Bytes of those requests
	SentSamples uint64 // Size.Samples of those requests
	Retries     uint64 // failed attempts that were retried
	// Dropped counts requests dropped, by reason; DropSpoolFull includes
	// the spool's evictions and DropCorrupt the entries it quarantined.
	Dropped      map[string]uint64
	SpoolEntries int    // requests waiting
	SpoolBytes   int64  // bytes waiting
	LastError    string // the current outage's last error, "" when delivering
}

// Stats returns a snapshot of the counters.
func (s *Shipper[R]) Stats() Stats {
	sp := s.spool.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Sent: s.sent, SentBytes: s.sentBytes, SentSamples: s.sentSamples, Retries: s.retries,
		Dropped:      maps.Clone(s.dropped),
		SpoolEntries: sp.Entries, SpoolBytes: sp.Bytes,
		LastError: s.lastErr,
	}
	st.Dropped[DropSpoolFull] += sp.DroppedOldest
	// Entries the spool itself found corrupt never reach the shipper.
	st.Dropped[DropCorrupt] += sp.Corrupt
	return st
}
