// Package remotewrite sends the agent's metrics (GPU and self metrics, from
// its client_golang registry) to Prometheus, Mimir or any receiver of the
// Prometheus remote-write 1.0 protocol.
//
// Every interval the registry is gathered into series stamped with one time,
// cut into requests of a bounded number of samples, encoded (snappy-compressed
// protobuf WriteRequest) and appended to the agent's on-disk spool before
// anything tries to send it. A shipper delivers the spool in order: while the
// receiver is down, or answers 5xx or 429, the oldest request is retried with
// capped, jittered backoff and everything behind it waits, because
// Prometheus rejects samples that arrive out of order within a series. A
// request the receiver refuses as bad (other 4xx) is dropped and counted. The
// spool's bound and its oldest-first eviction are the only other way data is
// lost, and that is counted too. A restart replays what the spool holds.
package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/spool"
)

// Drop reasons, as counted in Stats.Dropped and exported as the reason label.
const (
	DropRejected   = "rejected"    // the receiver refused the request (4xx other than 401/403/408/429)
	DropSpoolFull  = "spool_full"  // evicted from the full spool to make room for newer data
	DropCorrupt    = "corrupt"     // a spool entry that could not be read or decoded
	DropTooLarge   = "too_large"   // a request bigger than the whole spool
	DropSpoolWrite = "spool_write" // the spool could not store the request (disk error)
)

// dropReasons lists every reason, so that each is exported from the start.
var dropReasons = []string{DropRejected, DropSpoolFull, DropCorrupt, DropTooLarge, DropSpoolWrite}

// Defaults for the zero values of Config.
const (
	DefaultInterval             = 15 * time.Second
	DefaultTimeout              = 30 * time.Second
	DefaultMaxSamplesPerRequest = 2000
	DefaultMinBackoff           = time.Second
	DefaultMaxBackoff           = time.Minute
	DefaultFlushTimeout         = 5 * time.Second
)

// Config is how the agent remote-writes.
type Config struct {
	// URL is the receiver's write endpoint, e.g.
	// http://prometheus:9090/api/v1/write (Prometheus started with
	// --web.enable-remote-write-receiver) or https://mimir/api/v1/push.
	URL string
	// Tenant is sent as X-Scope-OrgID when not empty.
	Tenant string

	// BasicAuthUser and BasicAuthPasswordFile enable basic auth. The file
	// is re-read when it changes, so credentials rotate without a restart.
	BasicAuthUser         string
	BasicAuthPasswordFile string
	// BearerTokenFile enables bearer auth; re-read when it changes.
	// Exclusive with basic auth.
	BearerTokenFile string

	TLS TLSConfig

	// Timeout bounds one request, connection included. Default 30 s.
	Timeout time.Duration
	// Interval is the time between two gathers. Default 15 s.
	Interval time.Duration
	// MaxSamplesPerRequest bounds one request. Default 2000.
	MaxSamplesPerRequest int

	// ExternalLabels are added to every series that lacks them. Several
	// agents write the same self-metric names, so set at least the node's
	// host label here, or their series collide in the receiver.
	ExternalLabels map[string]string

	// MinBackoff and MaxBackoff bound the delay between retries of the
	// head request. Defaults 1 s and 1 min.
	MinBackoff, MaxBackoff time.Duration
	// FlushTimeout bounds the last delivery attempt when Run stops.
	// Default 5 s; negative disables it.
	FlushTimeout time.Duration

	// UserAgent is sent with every request. Default "slurmscope-agent".
	UserAgent string
	// Transport replaces the HTTP transport (tests); TLS is then ignored.
	Transport http.RoundTripper
}

// Writer gathers, spools and ships metrics. Create one with New and start it
// with Run.
type Writer struct {
	spool    *spool.Spool
	gatherer prometheus.Gatherer
	client   *client
	log      *slog.Logger
	ext      []Label

	interval               time.Duration
	maxSamples             int
	backoffMin, backoffMax time.Duration
	flushTimeout           time.Duration
	now                    func() time.Time // tests replace it

	running atomic.Bool

	// collectMu serialises CollectOnce, so that timestamps and spool order agree.
	collectMu sync.Mutex
	lastTS    int64 // last gather's timestamp (ms)

	mu           sync.Mutex
	requests     uint64
	samples      uint64
	bytes        uint64
	retries      uint64
	gatherErrors uint64
	skipped      uint64
	dropped      map[string]uint64
	logged       map[string]bool // reasons already logged
	lastErr      string
}

// New validates cfg and builds a Writer that spools to sp and gathers from
// g. The spool must be the Writer's own: its entries are remote-write
// requests, and it expects one consumer. A nil log means slog.Default().
func New(cfg Config, sp *spool.Spool, g prometheus.Gatherer, log *slog.Logger) (*Writer, error) {
	if sp == nil || g == nil {
		return nil, errors.New("remote write: a spool and a gatherer are required")
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	w := &Writer{
		spool: sp, gatherer: g, client: c, log: log,
		interval: cfg.Interval, maxSamples: cfg.MaxSamplesPerRequest,
		backoffMin: cfg.MinBackoff, backoffMax: cfg.MaxBackoff,
		flushTimeout: cfg.FlushTimeout,
		now:          time.Now,
		dropped:      map[string]uint64{},
		logged:       map[string]bool{},
	}
	if w.interval <= 0 {
		w.interval = DefaultInterval
	}
	if w.maxSamples <= 0 {
		w.maxSamples = DefaultMaxSamplesPerRequest
	}
	if w.backoffMin <= 0 {
		w.backoffMin = DefaultMinBackoff
	}
	if w.backoffMax <= 0 {
		w.backoffMax = max(DefaultMaxBackoff, w.backoffMin)
	}
	w.backoffMax = max(w.backoffMax, w.backoffMin)
	if w.flushTimeout == 0 {
		w.flushTimeout = DefaultFlushTimeout
	}
	w.lastTS = readLastTimestamp(sp.Dir())
	for _, name := range slices.Sorted(maps.Keys(cfg.ExternalLabels)) {
		w.ext = append(w.ext, Label{name, cfg.ExternalLabels[name]})
	}
	if _, err := normalizeLabels(append(slices.Clone(w.ext), Label{MetricNameLabel, "x"})); err != nil {
		return nil, fmt.Errorf("remote write external labels: %w", err)
	}
	return w, nil
}

// Run gathers every interval (the first time at once) and ships until ctx
// is done. Then it gathers one last time and, for at most the flush
// timeout, lets the request in flight finish and delivers what is queued,
// stopping at the first failure: what is not delivered stays in the spool
// for the next start. Run returns nil after a clean stop, and an error if
// the spool fails under it. Run may be called once.
func (w *Writer) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("remote write: Run called twice")
	}
	// Gather before shipping starts, so that what the spool holds when
	// the shipper first looks (and so what a full spool evicts) does not
	// depend on goroutine scheduling.
	w.CollectOnce()

	// The shipper outlives ctx by design. Stopping has two steps: soft
	// (no more waiting or retrying; flush) right after the last gather,
	// and hard (abandon the request in flight) a flush timeout later.
	// Cutting a request short at once would often cut it after the
	// receiver stored it, and the flush would then send it twice.
	soft, stopSoft := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSoft()
	hard, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()
	shipped := make(chan error, 1)
	go func() { shipped <- w.ship(soft, hard) }()

	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.CollectOnce()
			stopSoft()
			if w.flushTimeout > 0 {
				defer time.AfterFunc(w.flushTimeout, stopHard).Stop()
			} else {
				stopHard()
			}
			return <-shipped
		case <-t.C:
			w.CollectOnce()
		case err := <-shipped:
			return err
		}
	}
}

// CollectOnce gathers once and spools the result. Run calls it every interval;
// it is exported for agents that drive their own schedule.
func (w *Writer) CollectOnce() {
	w.collectMu.Lock()
	defer w.collectMu.Unlock()
	at := w.now()
	// One timestamp per series and gather: if two gathers fall in the same
	// millisecond (the last one at stop) or the clock steps back, the later
	// one would be rejected as a duplicate or out of order, and with it the
	// whole request.
	if ms := at.UnixMilli(); ms <= w.lastTS {
		at = time.UnixMilli(w.lastTS + 1)
	}
	w.lastTS = at.UnixMilli()
	if err := writeLastTimestamp(w.spool.Dir(), w.lastTS); err != nil {
		w.logOnce("timestamp", "cannot record the last timestamp; a restart within the same millisecond may be rejected", "err", err)
	}

	series, skipped, err := FromGatherer(w.gatherer, at)
	w.mu.Lock()
	w.skipped += uint64(skipped)
	if err != nil {
		w.gatherErrors++
	}
	w.mu.Unlock()
	if err != nil {
		w.logOnce("gather", "gathering metrics failed; sending what was gathered", "err", err)
	}
	if skipped > 0 {
		w.logOnce("skipped", "left out series no receiver would accept (bad label names)", "series", skipped)
	}
	series = withExternalLabels(series, w.ext)
	for _, batch := range split(series, w.maxSamples) {
		w.enqueue(batch)
	}
}

func (w *Writer) enqueue(batch []TimeSeries) {
	entry, _ := encodeEntry(batch)
	err := w.spool.Append(entry)
	switch {
	case err == nil:
	case errors.Is(err, spool.ErrTooLarge):
		w.drop(DropTooLarge, fmt.Errorf("%w (lower MaxSamplesPerRequest or raise the spool bound)", err))
	case errors.Is(err, spool.ErrFull):
		w.drop(DropSpoolFull, err)
	default: // a disk error, or the spool was closed under us
		w.drop(DropSpoolWrite, err)
	}
}

// ship delivers the spool in order until soft is done, then flushes until
// hard is done.
func (w *Writer) ship(soft, hard context.Context) error {
	for {
		e, err := w.spool.Next(soft)
		if err != nil {
			if soft.Err() != nil {
				w.flush(hard)
				return nil
			}
			return fmt.Errorf("remote write spool: %w", err)
		}
		if !w.deliver(soft, hard, e) {
			w.flush(hard)
			return nil
		}
	}
}

// deliver sends e until it is delivered or dropped (true), or the shipper
// is stopping and e failed (false; e stays queued).
func (w *Writer) deliver(soft, hard context.Context, e spool.Entry) bool {
	body, samples, err := decodeEntry(e.Payload)
	if err != nil {
		w.drop(DropCorrupt, fmt.Errorf("spool entry %d: %w", e.Seq, err))
		w.ack(e.Seq)
		return true
	}
	for attempt := 0; ; attempt++ {
		err := w.client.send(hard, body)
		if err == nil {
			w.delivered(e.Seq, samples, len(body))
			return true
		}
		if hard.Err() != nil {
			return false
		}
		if !IsRetryable(err) {
			w.drop(DropRejected, err)
			w.ack(e.Seq)
			return true
		}
		if soft.Err() != nil {
			return false
		}
		w.mu.Lock()
		w.retries++
		first := w.lastErr == ""
		w.lastErr = err.Error()
		w.mu.Unlock()
		if first {
			// Once per outage, not once per retry.
			w.log.Warn("remote write receiver unavailable; keeping metrics in the spool and retrying", "err", err)
		}
		d := w.backoff(attempt)
		var se *SendError
		if errors.As(err, &se) && se.RetryAfter > d {
			d = min(se.RetryAfter, w.backoffMax)
		}
		select {
		case <-soft.Done():
			return false
		case <-time.After(d):
		}
	}
}

// flush delivers what it can until ctx is done, giving up at the first
// retryable failure instead of retrying.
func (w *Writer) flush(ctx context.Context) {
	for ctx.Err() == nil {
		e, err := w.spool.Peek()
		if err != nil {
			return
		}
		body, samples, err := decodeEntry(e.Payload)
		if err != nil {
			w.drop(DropCorrupt, fmt.Errorf("spool entry %d: %w", e.Seq, err))
			w.ack(e.Seq)
			continue
		}
		err = w.client.send(ctx, body)
		switch {
		case err == nil:
			w.delivered(e.Seq, samples, len(body))
		case ctx.Err() != nil:
			return
		case !IsRetryable(err):
			w.drop(DropRejected, err)
			w.ack(e.Seq)
		default:
			return
		}
	}
}

func (w *Writer) delivered(seq uint64, samples, bytes int) {
	w.ack(seq)
	w.mu.Lock()
	w.requests++
	w.samples += uint64(samples)
	w.bytes += uint64(bytes)
	recovered := w.lastErr != ""
	w.lastErr = ""
	w.mu.Unlock()
	if recovered {
		w.log.Info("remote write receiver reachable again; delivering the spool")
	}
}

// backoff is the delay before retry attempt+1: exponential from backoffMin,
// capped at backoffMax, with "equal jitter" (half fixed, half random) so a
// cluster of agents does not retry in lockstep after an outage.
func (w *Writer) backoff(attempt int) time.Duration {
	d := w.backoffMin
	for i := 0; i < attempt && d < w.backoffMax; i++ {
		d *= 2
	}
	d = min(d, w.backoffMax)
	half := d / 2
	return half + rand.N(half+1)
}

func (w *Writer) ack(seq uint64) {
	if err := w.spool.Ack(seq); err != nil {
		w.log.Error("spool: ack failed; the request will be sent again", "seq", seq, "err", err)
	}
}

func (w *Writer) drop(reason string, err error) {
	w.mu.Lock()
	w.dropped[reason]++
	w.mu.Unlock()
	w.logOnce("drop:"+reason, "dropping metrics", "reason", reason, "err", err)
}

// logOnce logs the first occurrence of key only: a misbehaving collector or
// receiver must not flood the log. The counters carry the rest.
func (w *Writer) logOnce(key, msg string, args ...any) {
	w.mu.Lock()
	first := !w.logged[key]
	w.logged[key] = true
	w.mu.Unlock()
	if first {
		w.log.Error("remote write: "+msg, args...)
	}
}

// Stats is a snapshot of the writer's and its spool's counters.
type Stats struct {
	RequestsSent uint64 // requests delivered
	SamplesSent  uint64 // samples in those requests
	BytesSent    uint64 // compressed bytes of those requests
	Retries      uint64 // failed attempts that were retried
	// Dropped counts requests dropped, by reason (Drop* constants);
	// DropSpoolFull includes the spool's evictions and DropCorrupt the
	// entries the spool quarantined.
	Dropped       map[string]uint64
	GatherErrors  uint64 // gathers that returned an error
	SkippedSeries uint64 // series left out for invalid labels
	SpoolRequests int    // requests waiting
	SpoolBytes    int64  // bytes waiting
	LastError     string // the current outage's last error, "" when delivering
}

// Stats returns a snapshot of the counters.
func (w *Writer) Stats() Stats {
	sp := w.spool.Stats()
	w.mu.Lock()
	defer w.mu.Unlock()
	st := Stats{
		RequestsSent: w.requests, SamplesSent: w.samples, BytesSent: w.bytes, Retries: w.retries,
		Dropped:      maps.Clone(w.dropped),
		GatherErrors: w.gatherErrors, SkippedSeries: w.skipped,
		SpoolRequests: sp.Entries, SpoolBytes: sp.Bytes,
		LastError: w.lastErr,
	}
	st.Dropped[DropSpoolFull] += sp.DroppedOldest
	st.Dropped[DropCorrupt] += sp.Corrupt
	return st
}

// lastTSFile keeps the last gather's timestamp beside the spool (the spool
// ignores names without its entry suffix), so a restarted agent never stamps
// a sample at or before one it already sent: Prometheus would reject the
// whole request as out of order.
const lastTSFile = "last-timestamp"

func readLastTimestamp(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, lastTSFile))
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return v
}

func writeLastTimestamp(dir string, ms int64) error {
	tmp := filepath.Join(dir, lastTSFile+".new")
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(ms, 10)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, lastTSFile))
}
