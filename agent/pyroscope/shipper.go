package pyroscope

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/agent/spool"
)

// Drop reasons, as counted by Stats.Dropped and exported as the reason label.
const (
	DropRejected   = ship.DropRejected   // the server refused the request (4xx, InvalidArgument, ...)
	DropSpoolFull  = ship.DropSpoolFull  // evicted from the full spool to make room for newer data
	DropCorrupt    = ship.DropCorrupt    // a spool entry that could not be read or decoded
	DropTooLarge   = ship.DropTooLarge   // a request bigger than the whole spool
	DropSpoolWrite = ship.DropSpoolWrite // the spool could not store the request (disk error)
	DropInvalid    = "invalid"           // a request that failed validation before it was spooled
)

// dropReasons lists every reason, so that each is exported from the start.
var dropReasons = append(slices.Clone(ship.Reasons), DropInvalid)

// ShipperOption configures a Shipper.
type ShipperOption func(*ship.Options)

// WithBackoff sets the first and the largest delay between retries of the
// head request (the largest also caps the server's Retry-After). Defaults:
// 1 s and 2 min.
func WithBackoff(initial, max time.Duration) ShipperOption {
	return func(o *ship.Options) { o.MinBackoff, o.MaxBackoff = initial, max }
}

// WithFlushTimeout bounds the stop after Run's context is done: the push in
// flight may finish and what is queued is flushed, for at most this long.
// Default 5 s; 0 disables the flush.
func WithFlushTimeout(d time.Duration) ShipperOption {
	return func(o *ship.Options) { o.FlushTimeout = d }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) ShipperOption { return func(o *ship.Options) { o.Log = l } }

// Shipper moves push requests from the spool to Pyroscope, oldest first,
// with the retries, Retry-After, two-step stop and drop accounting of
// package ship.
type Shipper struct {
	ship *ship.Shipper[*pushv1.PushRequest]
}

// NewShipper ships from sp through p.
func NewShipper(sp *spool.Spool, p Pusher, opts ...ShipperOption) *Shipper {
	o := ship.Options{Name: "pyroscope", What: "profiles",
		MinBackoff: time.Second, MaxBackoff: 2 * time.Minute, FlushTimeout: 5 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	return &Shipper{ship: ship.New[*pushv1.PushRequest](sp, sender{p}, o)}
}

// sender is Pyroscope's part of the shipper: spool entries are marshalled
// push requests.
type sender struct{ p Pusher }

var _ ship.Sender[*pushv1.PushRequest] = sender{}

func (sender) Decode(payload []byte) (*pushv1.PushRequest, ship.Size, error) {
	req := &pushv1.PushRequest{}
	if err := proto.Unmarshal(payload, req); err != nil {
		return nil, ship.Size{}, err
	}
	return req, ship.Size{Bytes: len(payload)}, nil
}

func (s sender) Send(ctx context.Context, req *pushv1.PushRequest) error { return s.p.Push(ctx, req) }

// Enqueue validates req and spools it for shipping. It is what producers
// call each interval. A request that is invalid or could never fit is
// counted as dropped and returned as an error.
func (s *Shipper) Enqueue(req *pushv1.PushRequest) error {
	for _, series := range req.GetSeries() {
		if err := ValidateLabels(series.Labels); err != nil {
			s.ship.Discard(DropInvalid, err)
			return err
		}
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding push request: %w", err)
	}
	return s.ship.Enqueue(b)
}

// Run ships until ctx is done, then lets the push in flight finish and
// flushes what is queued, for at most the flush timeout and stopping at the
// first failure: what is not delivered stays in the spool for the next
// start. Run returns nil after a clean stop.
func (s *Shipper) Run(ctx context.Context) error { return s.ship.Run(ctx) }

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
	st := s.ship.Stats()
	return Stats{Pushed: st.Sent, PushedBytes: st.SentBytes, Retries: st.Retries, Dropped: st.Dropped,
		SpoolEntries: st.SpoolEntries, SpoolBytes: st.SpoolBytes, LastError: st.LastError}
}
