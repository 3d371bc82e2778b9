package pyroscope

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/agent/spool"
)

// Drop reasons, as counted by Stats.Dropped and exported as the reason label.
const (
	DropRejected  = "rejected"   // the server refused the request (4xx, InvalidArgument, ...)
	DropSpoolFull = "spool_full" // evicted from the full spool to make room for newer data
	DropCorrupt   = "corrupt"    // a spool entry that could not be read or decoded
	DropTooLarge  = "too_large"  // a request bigger than the whole spool
	DropInvalid   = "invalid"    // a request that failed validation before it was spooled
)

// ShipperOption configures a Shipper.
type ShipperOption func(*Shipper)

// WithBackoff sets the first and the largest delay between retries of the
// head request. Defaults: 1 s and 2 min.
func WithBackoff(initial, max time.Duration) ShipperOption {
	return func(s *Shipper) { s.backoffMin, s.backoffMax = initial, max }
}

// WithFlushTimeout bounds the final flush after Run's context is done.
// Default 5 s; 0 disables the flush.
func WithFlushTimeout(d time.Duration) ShipperOption {
	return func(s *Shipper) { s.flushTimeout = d }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) ShipperOption { return func(s *Shipper) { s.log = l } }

// Shipper moves push requests from the spool to Pyroscope, oldest first. A
// retryable failure holds the queue (head-of-line) and retries with capped,
// jittered exponential backoff, so data arrives in order; a permanent failure
// drops that one request and counts it. Delivery is exactly-once while the
// agent runs and at-least-once across a crash (see package spool).
type Shipper struct {
	spool  *spool.Spool
	pusher Pusher
	log    *slog.Logger

	backoffMin, backoffMax time.Duration
	flushTimeout           time.Duration

	mu          sync.Mutex
	pushed      uint64
	pushedBytes uint64
	retries     uint64
	dropped     map[string]uint64
	logged      map[string]bool // drop reasons already logged
	lastErr     string
}

// NewShipper ships from sp through p.
func NewShipper(sp *spool.Spool, p Pusher, opts ...ShipperOption) *Shipper {
	s := &Shipper{
		spool: sp, pusher: p, log: slog.Default(),
		backoffMin: time.Second, backoffMax: 2 * time.Minute,
		flushTimeout: 5 * time.Second,
		dropped:      map[string]uint64{},
		logged:       map[string]bool{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.backoffMin <= 0 {
		s.backoffMin = time.Millisecond
	}
	if s.backoffMax < s.backoffMin {
		s.backoffMax = s.backoffMin
	}
	return s
}

// Enqueue validates req and spools it for shipping. It is what producers
// call each interval. A request that is invalid or could never fit is
// counted as dropped and returned as an error.
func (s *Shipper) Enqueue(req *pushv1.PushRequest) error {
	for _, series := range req.GetSeries() {
		if err := ValidateLabels(series.Labels); err != nil {
			s.drop(DropInvalid, err)
			return err
		}
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding push request: %w", err)
	}
	if err := s.spool.Append(b); err != nil {
		if errors.Is(err, spool.ErrTooLarge) {
			s.drop(DropTooLarge, err)
		} else if errors.Is(err, spool.ErrFull) {
			s.drop(DropSpoolFull, err)
		}
		return err
	}
	return nil
}

// Run ships until ctx is done, then tries for at most the flush timeout to
// deliver what is left, stopping at the first failure: what is not delivered
// stays in the spool for the next start. Run returns nil after a clean stop.
func (s *Shipper) Run(ctx context.Context) error {
	for {
		e, err := s.spool.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				s.flush()
				return nil
			}
			return err
		}
		if !s.deliver(ctx, e) {
			s.flush()
			return nil
		}
	}
}

// deliver pushes e until it is delivered or dropped (true), or ctx is done
// (false; e stays queued).
func (s *Shipper) deliver(ctx context.Context, e spool.Entry) bool {
	req := &pushv1.PushRequest{}
	if err := proto.Unmarshal(e.Payload, req); err != nil {
		s.drop(DropCorrupt, fmt.Errorf("spool entry %d: %w", e.Seq, err))
		s.ack(e.Seq)
		return true
	}
	for attempt := 0; ; attempt++ {
		err := s.pusher.Push(ctx, req)
		if err == nil {
			s.ack(e.Seq)
			s.mu.Lock()
			s.pushed++
			s.pushedBytes += uint64(len(e.Payload))
			s.lastErr = ""
			s.mu.Unlock()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !IsRetryable(err) {
			s.drop(DropRejected, err)
			s.ack(e.Seq)
			return true
		}
		s.mu.Lock()
		s.retries++
		first := s.lastErr == ""
		s.lastErr = err.Error()
		s.mu.Unlock()
		if first {
			// Once per outage, not once per retry.
			s.log.Warn("pyroscope unreachable; keeping profiles in the spool and retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(s.backoff(attempt)):
		}
	}
}

// flush delivers what it can within the flush timeout, giving up at the
// first failure instead of retrying.
func (s *Shipper) flush() {
	if s.flushTimeout <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.flushTimeout)
	defer cancel()
	for ctx.Err() == nil {
		e, err := s.spool.Peek()
		if err != nil {
			return
		}
		req := &pushv1.PushRequest{}
		if err := proto.Unmarshal(e.Payload, req); err != nil {
			s.drop(DropCorrupt, fmt.Errorf("spool entry %d: %w", e.Seq, err))
			s.ack(e.Seq)
			continue
		}
		err = s.pusher.Push(ctx, req)
		switch {
		case err == nil:
			s.ack(e.Seq)
			s.mu.Lock()
			s.pushed++
			s.pushedBytes += uint64(len(e.Payload))
			s.mu.Unlock()
		case !IsRetryable(err):
			s.drop(DropRejected, err)
			s.ack(e.Seq)
		default:
			return
		}
	}
}

// backoff is the delay before retry attempt+1: exponential from backoffMin,
// capped at backoffMax, with "equal jitter" (half fixed, half random) so a
// cluster of agents does not retry in lockstep after an outage.
func (s *Shipper) backoff(attempt int) time.Duration {
	d := s.backoffMin
	for i := 0; i < attempt && d < s.backoffMax; i++ {
		d *= 2
	}
	d = min(d, s.backoffMax)
	half := d / 2
	return half + rand.N(half+1)
}

func (s *Shipper) ack(seq uint64) {
	if err := s.spool.Ack(seq); err != nil {
		s.log.Error("spool: ack failed; the entry will be sent again", "seq", seq, "err", err)
	}
}

func (s *Shipper) drop(reason string, err error) {
	s.mu.Lock()
	s.dropped[reason]++
	first := !s.logged[reason]
	s.logged[reason] = true
	s.mu.Unlock()
	if first {
		// Once per reason: a misbehaving producer must not flood the log.
		// The counters carry the rest.
		s.log.Error("dropping profiles", "reason", reason, "err", err)
	}
}

// Stats is a snapshot of the shipper's and its spool's counters.
type Stats struct {
	Pushed      uint64 // requests delivered
	PushedBytes uint64 // encoded bytes of those requests
	Retries     uint64 // failed attempts that were retried
	// Dropped counts requests dropped, by reason (Drop* constants);
	// DropSpoolFull comes from the spool's evictions.
	Dropped      map[string]uint64
	SpoolEntries int    // requests waiting
	SpoolBytes   int64  // bytes waiting
	LastError    string // the current outage's last error, "" when delivering
}

// Stats returns a snapshot of the counters.
func (s *Shipper) Stats() Stats {
	sp := s.spool.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Pushed: s.pushed, PushedBytes: s.pushedBytes, Retries: s.retries,
		Dropped:      map[string]uint64{},
		SpoolEntries: sp.Entries, SpoolBytes: sp.Bytes,
		LastError: s.lastErr,
	}
	for k, v := range s.dropped {
		st.Dropped[k] = v
	}
	st.Dropped[DropSpoolFull] += sp.DroppedOldest
	// Entries the spool itself found corrupt never reach the shipper.
	st.Dropped[DropCorrupt] += sp.Corrupt
	return st
}
