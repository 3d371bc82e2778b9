package pyroscope

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Window is the server's ingestion window: Pyroscope rejects a push
// holding a profile stamped more than OlderThan before its clock
// (-validation.reject-older-than) or more than NewerThan after it
// (-validation.reject-newer-than), with HTTP 400 "outside of ingestion
// window". Zero disables a bound.
type Window struct{ OlderThan, NewerThan time.Duration }

// DefaultWindow is Pyroscope's default window.
var DefaultWindow = Window{OlderThan: time.Hour, NewerThan: 10 * time.Minute}

// windowSlack narrows the window on each side (by at most half of it): it
// covers the Date header's one-second resolution and the push's time in
// flight, so that a profile judged inside is still inside when the server
// looks.
const windowSlack = 5 * time.Second

func slack(bound time.Duration) time.Duration { return min(windowSlack, bound/2) }

// tooOld reports whether a profile stamped ts (ns; 0 is unstamped, which
// the server stamps itself) is outside the window's far end at now.
func (w Window) tooOld(ts int64, now time.Time) bool {
	return ts != 0 && w.OlderThan > 0 && time.Unix(0, ts).Before(now.Add(-w.OlderThan+slack(w.OlderThan)))
}

// tooNew is the near end: how long until a profile stamped ts enters the
// window at now, 0 if it is in.
func (w Window) tooNew(ts int64, now time.Time) time.Duration {
	if ts == 0 || w.NewerThan <= 0 {
		return 0
	}
	return max(0, time.Unix(0, ts).Sub(now.Add(w.NewerThan-slack(w.NewerThan))))
}

// Clock estimates the server's clock, which the ingestion window is
// measured from, from the Date header of its responses: the last Date plus
// the time since on this node's monotonic clock, so a step of the node's
// wall clock (an NTP correction) does not move the estimate. Before the
// first response it is the node's clock. The estimate is good to about a
// second (Date's resolution); a gateway in front of Pyroscope answers with
// its own Date, which is as good where the gateway keeps time.
type Clock struct {
	now func() time.Time

	mu            sync.Mutex
	server, local time.Time // the server's time and ours at the last Date
	known         bool
}

// NewClock returns a clock that reads the node's time from now (nil:
// time.Now).
func NewClock(now func() time.Time) *Clock {
	if now == nil {
		now = time.Now
	}
	return &Clock{now: now}
}

// Observe records that the server's clock reads server now.
func (c *Clock) Observe(server time.Time) {
	local := c.now()
	c.mu.Lock()
	c.server, c.local, c.known = server, local, true
	c.mu.Unlock()
}

// observeDate records a response's Date header, if it has a valid one. A
// Date names a whole second: the middle of it is the best guess.
func (c *Clock) observeDate(h http.Header) {
	if d, err := http.ParseTime(h.Get("Date")); err == nil {
		c.Observe(d.Add(500 * time.Millisecond))
	}
}

// read returns the server's time and the node's, now.
func (c *Clock) read() (server, local time.Time, known bool) {
	local = c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known {
		return local, local, false
	}
	// local and c.local both carry monotonic readings under time.Now.
	return c.server.Add(local.Sub(c.local)), local, true
}

// Now is the server's time as far as the node knows it.
func (c *Clock) Now() time.Time { s, _, _ := c.read(); return s }

// Skew is the server's clock minus the node's, and whether a Date has come.
func (c *Clock) Skew() (time.Duration, bool) {
	s, l, ok := c.read()
	return s.Sub(l), ok // s has no monotonic reading: wall against wall
}

// dateRecorder feeds the Date of every response, error or not, to a Clock.
type dateRecorder struct {
	rt    http.RoundTripper
	clock *Clock
}

func (d dateRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.rt.RoundTrip(r)
	if err == nil {
		d.clock.observeDate(resp.Header)
	}
	return resp, err
}

// maxProfileRead bounds what profileTime decompresses: far above any
// profile the agent writes, and a guard against a payload that inflates
// without end.
const maxProfileRead = 256 << 20

// pprofTimeNanos is time_nanos in profile.proto, the timestamp Pyroscope
// checks against its window.
const pprofTimeNanos = 9

// profileTime reads a pprof profile's time_nanos (0 when unset) from a
// gzipped or plain profile, as a stream: nothing of the profile is kept.
func profileTime(raw []byte) (int64, error) {
	var r io.Reader = bytes.NewReader(raw)
	if len(raw) >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return 0, err
		}
		r = zr
	}
	br := bufio.NewReader(io.LimitReader(r, maxProfileRead))
	var ts int64
	for {
		tag, err := binary.ReadUvarint(br)
		if err == io.EOF {
			return ts, nil
		}
		if err != nil {
			return 0, err
		}
		if tag>>3 > uint64(protowire.MaxValidNumber) {
			// An int32 of it could wrap onto time_nanos.
			return 0, fmt.Errorf("pprof field number %d out of range", tag>>3)
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7) // #nosec G115 -- number checked just above, type masked to 3 bits
		var skip uint64
		switch typ {
		case protowire.VarintType:
			v, err := binary.ReadUvarint(br)
			if err != nil {
				return 0, noEOF(err)
			}
			if num == pprofTimeNanos {
				ts = int64(v) // #nosec G115 -- protobuf's int64 is the varint's two's complement; the last one wins, as in any protobuf decoder
			}
			continue
		case protowire.Fixed64Type:
			skip = 8
		case protowire.Fixed32Type:
			skip = 4
		case protowire.BytesType:
			if skip, err = binary.ReadUvarint(br); err != nil {
				return 0, noEOF(err)
			}
		default:
			return 0, fmt.Errorf("pprof: unexpected wire type %d", typ)
		}
		if skip > maxProfileRead {
			return 0, io.ErrUnexpectedEOF
		}
		if _, err := br.Discard(int(skip)); err != nil {
			return 0, noEOF(err)
		}
	}
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
