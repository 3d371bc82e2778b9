package pyroscope

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"
	"google.golang.org/protobuf/proto"

	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/schema"
)

// Drop reasons, as counted by Stats.Dropped and exported as the reason label.
const (
	DropRejected   = ship.DropRejected   // the server refused the request (4xx, InvalidArgument, ...)
	DropSpoolFull  = ship.DropSpoolFull  // evicted from the full spool to make room for newer data
	DropCorrupt    = ship.DropCorrupt    // a spool entry that could not be read or decoded
	DropTooLarge   = ship.DropTooLarge   // a request bigger than the whole spool
	DropSpoolWrite = ship.DropSpoolWrite // the spool could not store the request (disk error)
	DropInvalid    = "invalid"           // a request that failed validation before it was spooled
	DropTooOld     = "too_old"           // every profile of the request is older than the ingestion window
)

// dropReasons lists every reason, so that each is exported from the start.
var dropReasons = append(slices.Clone(ship.Reasons), DropInvalid, DropTooOld)

type shipperOptions struct {
	ship   ship.Options
	window Window
	clock  *Clock
}

// ShipperOption configures a Shipper.
type ShipperOption func(*shipperOptions)

// WithBackoff sets the first and the largest delay between retries of the
// head request (the largest also caps the server's Retry-After). Defaults:
// 1 s and 2 min.
func WithBackoff(initial, max time.Duration) ShipperOption {
	return func(o *shipperOptions) { o.ship.MinBackoff, o.ship.MaxBackoff = initial, max }
}

// WithFlushTimeout bounds the stop after Run's context is done: the push in
// flight may finish and what is queued is flushed, for at most this long.
// Default 5 s; 0 disables the flush.
func WithFlushTimeout(d time.Duration) ShipperOption {
	return func(o *shipperOptions) { o.ship.FlushTimeout = d }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) ShipperOption { return func(o *shipperOptions) { o.ship.Log = l } }

// WithIngestionWindow sets the server's ingestion window (default
// DefaultWindow, Pyroscope's); it must match the server's
// -validation.reject-older-than and -validation.reject-newer-than.
func WithIngestionWindow(w Window) ShipperOption { return func(o *shipperOptions) { o.window = w } }

// WithClock sets the clock the window is judged by. The default is the
// Pusher's own (Client.Clock) where it has one, the node's clock otherwise.
func WithClock(c *Clock) ShipperOption { return func(o *shipperOptions) { o.clock = c } }

// Shipper moves push requests from the spool to Pyroscope, oldest first,
// with the retries, Retry-After, two-step stop and drop accounting of
// package ship. It knows the server's ingestion window: profiles that a
// long outage left older than it are dropped before sending (DropTooOld),
// and profiles that a node's fast clock stamped ahead of it are held until
// it takes them.
type Shipper struct {
	ship *ship.Shipper[*pending]
	snd  *sender
}

// NewShipper ships from sp through p.
func NewShipper(sp *spool.Spool, p Pusher, opts ...ShipperOption) *Shipper {
	o := shipperOptions{ship: ship.Options{Name: "pyroscope", What: "profiles",
		MinBackoff: time.Second, MaxBackoff: 2 * time.Minute, FlushTimeout: 5 * time.Second},
		window: DefaultWindow}
	if c, ok := p.(interface{ Clock() *Clock }); ok {
		o.clock = c.Clock()
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = NewClock(nil)
	}
	if o.ship.Log == nil {
		o.ship.Log = slog.Default()
	}
	snd := &sender{p: p, window: o.window, clock: o.clock, log: o.ship.Log, after: o.ship.After}
	if snd.after == nil {
		snd.after = time.After
	}
	s := &Shipper{ship: ship.New[*pending](sp, snd, o.ship), snd: snd}
	snd.logError = s.ship.LogError
	return s
}

// pending is a decoded spool entry: the request and the time_nanos of each
// of its profiles (0 where unknown), series by series.
type pending struct {
	req *pushv1.PushRequest
	ts  [][]int64
}

// LogValue names what p carries for the shipper's debug line: its jobs
// (or services outside jobs) and profile types.
func (p *pending) LogValue() slog.Value {
	var jobs, services, types []string
	for _, s := range p.req.Series {
		for _, l := range s.Labels {
			switch l.Name {
			case schema.JobID.Label:
				jobs = appendNew(jobs, l.Value)
			case schema.ServiceName:
				services = appendNew(services, l.Value)
			case MetricNameLabel:
				types = appendNew(types, l.Value)
			}
		}
	}
	attrs := []slog.Attr{slog.String("type", strings.Join(types, ","))}
	if len(jobs) > 0 {
		attrs = append(attrs, slog.String("job", strings.Join(jobs, ",")))
	} else {
		attrs = append(attrs, slog.String("service", strings.Join(services, ",")))
	}
	return slog.GroupValue(append(attrs, slog.Int("profiles", p.profiles()))...)
}

func appendNew(list []string, v string) []string {
	if slices.Contains(list, v) {
		return list
	}
	return append(list, v)
}

// profiles counts the profiles left in p.
func (p *pending) profiles() (n int) {
	for _, ts := range p.ts {
		n += len(ts)
	}
	return n
}

// all reports whether every profile of p is stamped and satisfies f.
func (p *pending) all(f func(ts int64) bool) bool {
	for _, series := range p.ts {
		for _, ts := range series {
			if ts == 0 || !f(ts) {
				return false
			}
		}
	}
	return p.profiles() > 0
}

// remove takes the profiles for which f holds out of the request, and the
// series left without one, and returns how many went.
func (p *pending) remove(f func(ts int64) bool) (n int) {
	series, stamps := p.req.Series[:0], p.ts[:0]
	for i, s := range p.req.Series {
		samples, ts := s.Samples[:0], p.ts[i][:0]
		for j, t := range p.ts[i] {
			if f(t) {
				n++
				continue
			}
			samples, ts = append(samples, s.Samples[j]), append(ts, t)
		}
		s.Samples = samples
		if len(samples) > 0 || len(p.ts[i]) == 0 {
			series, stamps = append(series, s), append(stamps, ts)
		}
	}
	p.req.Series, p.ts = series, stamps
	return n
}

// skewWarn is the clock skew worth a warning; it is cleared below half of
// it. Far above the Date header's resolution, and well inside the window.
const skewWarn = 30 * time.Second

// sender is Pyroscope's part of the shipper: spool entries are marshalled
// push requests, judged against the ingestion window before each attempt.
type sender struct {
	p        Pusher
	window   Window
	clock    *Clock
	log      *slog.Logger
	logError func(key, msg string, err error, args ...any)

	after func(time.Duration) <-chan time.Time

	mu      sync.Mutex
	tooOld  uint64 // profiles dropped for their age, with their request or from it
	held    uint64 // requests held until the window takes them
	aheadOf bool   // the server refused profiles as ahead of its window
	skewed  bool   // a skew warning is standing
}

var _ ship.Sender[*pending] = (*sender)(nil)

func (*sender) Decode(payload []byte) (*pending, ship.Size, error) {
	req := &pushv1.PushRequest{}
	if err := proto.Unmarshal(payload, req); err != nil {
		return nil, ship.Size{}, err
	}
	p := &pending{req: req, ts: make([][]int64, len(req.Series))}
	for i, s := range req.Series {
		p.ts[i] = make([]int64, len(s.Samples))
		for j, sample := range s.Samples {
			// A profile whose time cannot be read is sent as it is: the
			// server judges it.
			p.ts[i][j], _ = profileTime(sample.RawProfile)
		}
	}
	// The bytes count what was spooled, even where too old profiles are
	// later cut out of the request.
	return p, ship.Size{Bytes: len(payload)}, nil
}

// Send pushes what of p is inside the window. A profile is dropped before
// sending only when it is too old both by the server's clock (as its Date
// tells) and by the node's: a wrong Date alone never drops what the server
// would take. Where the server refuses a request, its Date decides whether
// the window was the cause: a request all too old is counted as
// DropTooOld, one all ahead of the window (the node's clock is fast) is
// held until the window reaches it, and so are the requests after it for
// as long as the clocks disagree. A hold ends early only with ctx.
func (s *sender) Send(ctx context.Context, p *pending) error {
	for held := false; ; {
		server, local, _ := s.clock.read()
		if n := p.remove(func(ts int64) bool { return s.window.tooOld(ts, server) && s.window.tooOld(ts, local) }); n > 0 {
			s.count(&s.tooOld, n)
			err := fmt.Errorf("%d profile(s) older than the server's ingestion window (%v); raise -validation.reject-older-than on the server and --pyroscope-reject-older-than here to the spool's time bound", n, s.window.OlderThan)
			if p.profiles() == 0 {
				return ship.Drop(DropTooOld, err) // logged and counted by the shipper
			}
			// Said as the shipper says a whole request's drop: one error.
			s.logError("drop:"+DropTooOld, "dropping profiles", ship.Drop(DropTooOld, err), "reason", DropTooOld)
		}
		if wait := p.ahead(s.window, server); wait > 0 && s.isAhead() {
			if !held {
				held = true
				s.count(&s.held, 1)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.after(wait):
			}
			continue
		}
		err := s.p.Push(ctx, p.req)
		s.checkSkew()
		if err == nil || IsRetryable(err) {
			return err
		}
		server = s.clock.Now()
		if p.all(func(ts int64) bool { return s.window.tooOld(ts, server) }) {
			s.count(&s.tooOld, p.profiles())
			return ship.Drop(DropTooOld, fmt.Errorf("older than the ingestion window by the server's clock: %w", err))
		}
		if !p.all(func(ts int64) bool { return s.window.tooNew(ts, server) > 0 }) {
			return err
		}
		s.mu.Lock()
		s.aheadOf = true
		s.mu.Unlock()
		s.logError("ahead", "profiles are stamped ahead of the server's ingestion window (is this node's clock fast?); holding them until it takes them", err)
	}
}

// ahead is how long until every profile of p is inside the window's near
// end, by the server's clock now.
func (p *pending) ahead(w Window, now time.Time) (wait time.Duration) {
	for _, series := range p.ts {
		for _, ts := range series {
			wait = max(wait, w.tooNew(ts, now))
		}
	}
	return wait
}

// isAhead reports whether the server has refused profiles as ahead of its
// window, and the clocks still disagree: only then does the node hold
// profiles before sending them, so that a wrong Date alone delays nothing.
func (s *sender) isAhead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aheadOf
}

func (s *sender) count(c *uint64, n int) {
	s.mu.Lock()
	*c += uint64(n) // #nosec G115 -- n is a count or a length, never negative
	s.mu.Unlock()
}

// checkSkew logs when the skew between the clocks becomes large enough to
// matter, and when it is gone.
func (s *sender) checkSkew() {
	skew, ok := s.clock.Skew()
	if !ok {
		return
	}
	abs := skew.Abs()
	s.mu.Lock()
	warn, clear := !s.skewed && abs >= skewWarn, s.skewed && abs < skewWarn/2
	s.skewed = (s.skewed || warn) && !clear
	if clear {
		s.aheadOf = false
	}
	s.mu.Unlock()
	switch {
	case warn:
		s.log.Warn("pyroscope: the server's clock and this node's disagree; the ingestion window is judged by the server's",
			"server_minus_node", skew.Round(time.Second))
	case clear:
		s.log.Info("pyroscope: the server's clock and this node's agree again", "server_minus_node", skew.Round(time.Second))
	}
}

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
	// TooOldProfiles counts profiles dropped as older than the window,
	// with their request (Dropped[DropTooOld]) or cut from it.
	TooOldProfiles uint64
	// Held counts requests held back because the server refuses their
	// profiles as ahead of its clock.
	Held uint64
	// ClockSkew is the server's clock minus the node's, once a response
	// has told it (ClockSkewKnown).
	ClockSkew      time.Duration
	ClockSkewKnown bool
}

// Stats returns a snapshot of the counters.
func (s *Shipper) Stats() Stats {
	st := s.ship.Stats()
	out := Stats{Pushed: st.Sent, PushedBytes: st.SentBytes, Retries: st.Retries, Dropped: st.Dropped,
		SpoolEntries: st.SpoolEntries, SpoolBytes: st.SpoolBytes, LastError: st.LastError}
	out.ClockSkew, out.ClockSkewKnown = s.snd.clock.Skew()
	s.snd.mu.Lock()
	out.TooOldProfiles, out.Held = s.snd.tooOld, s.snd.held
	s.snd.mu.Unlock()
	return out
}
