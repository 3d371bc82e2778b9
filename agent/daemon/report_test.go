package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/source"
)

// reportingSink is a sink that says what it delivered, as the spooled
// backends do.
type reportingSink struct {
	memSink
	del Delivery
	err error
}

func (r *reportingSink) Write(ctx context.Context, outs []Output) error {
	if r.err != nil {
		return r.err
	}
	return r.memSink.Write(ctx, outs)
}

func (r *reportingSink) Delivery() Delivery { return r.del }

// textLog logs as the agent does, without the time and the duration.
func textLog(b *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "took" {
				return slog.Attr{}
			}
			return a
		}}))
}

// TestIntervalLine runs Collect and reads its info line: jobs profiled,
// profiles and their bytes, samples in profiles and not, and what the sink
// shipped and dropped since the last line and holds in its spool.
func TestIntervalLine(t *testing.T) {
	res, samples := fixture()
	sink := &reportingSink{del: Delivery{Bytes: 1000, Dropped: 1, SpoolFiles: 3, SpoolBytes: 4096}}
	var logs strings.Builder
	now := time.Unix(1000, 0)
	src := cpuLike(samples, []source.Sample{cpuSample(proc(20, 200), 4, nil, 4)})
	d := New(Config{Log: textLog(&logs), Now: func() time.Time { return now }}, []source.Source{src}, &fakeSym{}, res, sink)

	now = now.Add(15 * time.Second)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	bytes := 0
	for _, o := range sink.outs {
		bytes += len(o.Data)
	}
	// Jobs 1 and 2: 6 + 5 samples; 67 of processes gone, in no job or
	// of another node.
	want := fmt.Sprintf("level=INFO msg=interval jobs=2 profiles=2 samples=11 samples_unattributed=67 profile_bytes=%d shipped_bytes=1000 spool_files=3 spool_bytes=4096 dropped=1\n", bytes)
	if got := logs.String(); got != want {
		t.Errorf("first interval logged\n%q\nwant\n%q", got, want)
	}

	logs.Reset()
	sink.outs = nil
	sink.del = Delivery{Bytes: 1500, Dropped: 1}
	now = now.Add(15 * time.Second)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("level=INFO msg=interval jobs=1 profiles=1 samples=4 samples_unattributed=0 profile_bytes=%d shipped_bytes=500 spool_files=0 spool_bytes=0 dropped=0\n", len(sink.outs[0].Data))
	if got := logs.String(); got != want {
		t.Errorf("second interval logged\n%q\nwant\n%q", got, want)
	}

	// An idle interval has its line too; a sink that reports nothing
	// leaves the delivery out.
	logs.Reset()
	d.sink = &memSink{}
	now = now.Add(15 * time.Second)
	if err := d.Collect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := logs.String(), "level=INFO msg=interval jobs=0 profiles=0 samples=0 samples_unattributed=0 profile_bytes=0\n"; got != want {
		t.Errorf("idle interval logged\n%q\nwant\n%q", got, want)
	}
}

// TestCollectErrorIsOneLine: profiles that fail alike make one line with
// their count, and the failure is logged when new, then only counted
// until the period has passed.
func TestCollectErrorIsOneLine(t *testing.T) {
	res, samples := fixture()
	var logs strings.Builder
	full := errors.New("pyroscope spool: full")
	sink := &reportingSink{err: logx.Join(full, full, full)} // as the sinks join their profiles' errors
	src := cpuLike(samples, samples)
	d := New(Config{Log: textLog(&logs)}, []source.Source{src}, &fakeSym{}, res, sink)
	for range 2 {
		err := d.Collect(context.Background())
		if err == nil || err.Error() != "writing profiles: pyroscope spool: full (3 times)" {
			t.Fatalf("Collect = %v", err)
		}
		d.logError("collect", "interval failed", err)
	}
	var failed []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "interval failed") {
			failed = append(failed, l)
		}
	}
	if want := `level=WARN msg="interval failed" err="writing profiles: pyroscope spool: full (3 times)"`; len(failed) != 1 || failed[0] != want {
		t.Errorf("logged %q, want once %q", failed, want)
	}
}
