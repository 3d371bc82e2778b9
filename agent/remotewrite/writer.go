// Package remotewrite sends the agent's metrics (what its client_golang
// registry serves on /metrics: GPU, host and self metrics) to Prometheus,
// Mimir or any receiver of the Prometheus remote-write 1.0 protocol.
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
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/ship"
	"github.com/slurmscope/slurmscope/agent/spool"
)

// Drop reasons, as counted in Stats.Dropped and exported as the reason label.
const (
	DropRejected   = ship.DropRejected   // the receiver refused the request (4xx other than 401/403/408/429)
	DropSpoolFull  = ship.DropSpoolFull  // evicted from the full spool to make room for newer data
	DropCorrupt    = ship.DropCorrupt    // a spool entry that could not be read or decoded
	DropTooLarge   = ship.DropTooLarge   // a request bigger than the whole spool
	DropSpoolWrite = ship.DropSpoolWrite // the spool could not store the request (disk error)
)

// dropReasons lists every reason, so that each is exported from the start.
var dropReasons = ship.Reasons

// Defaults for the zero values of Config.
const (
	DefaultInterval             = 15 * time.Second
	DefaultTimeout              = httpclient.DefaultTimeout
	DefaultMaxSamplesPerRequest = 2000
	DefaultMinBackoff           = time.Second
	DefaultMaxBackoff           = time.Minute
	DefaultFlushTimeout         = 5 * time.Second
)

// Config is how the agent remote-writes. Its URL is the receiver's write
// endpoint, e.g. http://prometheus:9090/api/v1/write (Prometheus started
// with --web.enable-remote-write-receiver) or https://mimir/api/v1/push.
type Config struct {
	httpclient.Config

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
}

// Writer gathers, spools and ships metrics. Create one with New and start it
// with Run.
type Writer struct {
	spool    *spool.Spool
	ship     *ship.Shipper[[]byte]
	gatherer prometheus.Gatherer
	client   *client
	ext      []Label

	interval   time.Duration
	maxSamples int
	now        func() time.Time // tests replace it

	running atomic.Bool

	// collectMu serialises CollectOnce, so that timestamps and spool order agree.
	collectMu sync.Mutex
	lastTS    int64 // last gather's timestamp (ms)

	mu           sync.Mutex
	gatherErrors uint64
	skipped      uint64
}

// New validates cfg and builds a Writer that spools to sp and gathers from
// g. The spool must be the Writer's own: its entries are remote-write
// requests, and it expects one consumer. A nil log means slog.Default().
func New(cfg Config, sp *spool.Spool, g prometheus.Gatherer, log *slog.Logger) (*Writer, error) {
	if sp == nil || g == nil {
		return nil, errors.New("remote write: a spool and a gatherer are required")
	}
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	o := ship.Options{Name: op, What: "metrics", Log: log,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff, FlushTimeout: cfg.FlushTimeout}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.FlushTimeout == 0 {
		o.FlushTimeout = DefaultFlushTimeout
	}
	w := &Writer{
		spool: sp, gatherer: g, client: c,
		ship:     ship.New[[]byte](sp, sender{c}, o),
		interval: cfg.Interval, maxSamples: cfg.MaxSamplesPerRequest,
		now: time.Now,
	}
	if w.interval <= 0 {
		w.interval = DefaultInterval
	}
	if w.maxSamples <= 0 {
		w.maxSamples = DefaultMaxSamplesPerRequest
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

// sender is remote write's part of the shipper: a spool entry holds the
// compressed body and its sample count (see encodeEntry).
type sender struct{ c *client }

var _ ship.Sender[[]byte] = sender{}

func (sender) Decode(entry []byte) ([]byte, ship.Size, error) {
	body, samples, err := decodeEntry(entry)
	return body, ship.Size{Bytes: len(body), Samples: samples}, err
}

func (s sender) Send(ctx context.Context, body []byte) error { return s.c.send(ctx, body) }

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

	// The shipper outlives ctx until the last gather is spooled, so that
	// its stop flushes that one too.
	shipCtx, stopShip := context.WithCancel(context.WithoutCancel(ctx))
	defer stopShip()
	shipped := make(chan error, 1)
	go func() { shipped <- w.ship.Run(shipCtx) }()

	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.CollectOnce()
			stopShip()
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
		w.ship.LogError("timestamp", "cannot record the last timestamp; a restart within the same millisecond may be rejected", err)
	}

	series, skipped, err := FromGatherer(w.gatherer, at)
	w.mu.Lock()
	w.skipped += uint64(skipped) // #nosec G115 -- a count, never negative
	if err != nil {
		w.gatherErrors++
	}
	w.mu.Unlock()
	if err != nil {
		w.ship.LogError("gather", "gathering metrics failed; sending what was gathered", err)
	}
	if skipped > 0 {
		w.ship.LogError("skipped", "left out series no receiver would accept (bad label names)", nil, "series", skipped)
	}
	series = withExternalLabels(series, w.ext)
	for _, batch := range split(series, w.maxSamples) {
		w.enqueue(batch)
	}
}

func (w *Writer) enqueue(batch []TimeSeries) {
	entry, _ := encodeEntry(batch)
	_ = w.ship.Enqueue(entry) // counted as dropped there
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
	st := w.ship.Stats()
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{
		RequestsSent: st.Sent, SamplesSent: st.SentSamples, BytesSent: st.SentBytes, Retries: st.Retries,
		Dropped:      st.Dropped,
		GatherErrors: w.gatherErrors, SkippedSeries: w.skipped,
		SpoolRequests: st.SpoolEntries, SpoolBytes: st.SpoolBytes,
		LastError: st.LastError,
	}
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
