package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefusesBadFlags: every bad value is a configuration error found
// by the flags' check, before anything loads (no root needed): exit 2 and
// one line on stderr that names the flag. A value no flag reads (a
// negative size, a number that is not one) is refused by the flag package,
// which names the flag with one dash.
func TestRunRefusesBadFlags(t *testing.T) {
	tmp := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Whatever the case, the rest is good: a writable output directory
	// and a free metrics port.
	good := []string{"--output-dir=" + filepath.Join(tmp, "out"), "--metrics-addr=127.0.0.1:0"}
	for _, tc := range []struct {
		arg, flag string
	}{
		{"--pyroscope-url=grafana-host:4040", "--pyroscope-url"},
		{"--pyroscope-url=pyroscope", "--pyroscope-url"},
		{"--pyroscope-url=ftp://pyroscope:4040", "--pyroscope-url"},
		{"--pyroscope-url=http://", "--pyroscope-url"},
		{"--prometheus-remote-write-url=prometheus:9090/api/v1/write", "--prometheus-remote-write-url"},
		{"--prometheus-remote-write-url=/api/v1/write", "--prometheus-remote-write-url"},
		{"--pyroscope-timeout=0s", "--pyroscope-timeout"},
		{"--prometheus-remote-write-timeout=-1s", "--prometheus-remote-write-timeout"},
		{"--prometheus-remote-write-interval=0s", "--prometheus-remote-write-interval"},
		{"--spool-max-bytes=-1", "-spool-max-bytes"},
		{"--spool-max-bytes=0", "--spool-max-bytes"},
		{"--remote-write-spool-max-bytes=-5", "-remote-write-spool-max-bytes"},
		{"--unwind-table-bytes=-1", "-unwind-table-bytes"},
		{"--memory-budget-bytes=-1", "-memory-budget-bytes"},
		{"--memory-budget-job-bytes=-1", "-memory-budget-job-bytes"},
		{"--job-read-burst-bytes=0", "--job-read-burst-bytes"},
		{"--job-read-bytes-per-second=-1", "-job-read-bytes-per-second"},
		{"--sample-rate=0", "--sample-rate"},
		{"--sample-rate=-1", "--sample-rate"},
		{"--sample-rate=1000000", "--sample-rate"},
		{"--sample-rate=abc", "-sample-rate"},
		{"--output-max-bytes=-1", "-output-max-bytes"},
		{"--rescan-interval=-5s", "--rescan-interval"},
		{"--rescan-interval=0s", "--rescan-interval"},
		{"--gpu-interval=0s", "--gpu-interval"},
		{"--gpu-interval=-1s", "--gpu-interval"},
		{"--host-metrics-interval=0s", "--host-metrics-interval"},
		{"--upload-interval=-1s", "--upload-interval"},
		{"--pyroscope-reject-older-than=-1h", "--pyroscope-reject-older-than"},
		{"--pyroscope-reject-newer-than=-1m", "--pyroscope-reject-newer-than"},
		{"--gpu-inject-lib=" + filepath.Join(tmp, "missing.so"), "--gpu-inject-lib"},
		{"--gpu-inject-lib=" + tmp, "--gpu-inject-lib"},
		{"--metrics-addr=bogus", "--metrics-addr"},
		{"--metrics-addr=127.0.0.1:99999", "--metrics-addr"},
		{"--metrics-addr=" + ln.Addr().String(), "--metrics-addr"}, // in use
		{"--web.config.file=" + filepath.Join(tmp, "missing.yml"), "--web.config.file"},
		{"--output-dir=/proc/nope", "--output-dir"},
		{"--unwind=dwarf", "--unwind"},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			var stdout, stderr strings.Builder
			// The flag under test comes last: it wins over good's.
			rc := Main(append([]string{"run"}, append(good, tc.arg)...), &stdout, &stderr)
			msg := stderr.String()
			if rc != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", rc, msg)
			}
			if strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") || strings.Contains(msg, `\n`) {
				t.Errorf("stderr is not one line:\n%s", msg)
			}
			if !strings.HasPrefix(msg, "run: ") || !strings.Contains(msg, tc.flag) {
				t.Errorf("stderr %q does not name %s", msg, tc.flag)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

// TestURLErrorShowsExample: a URL without a scheme says what one looks
// like.
func TestURLErrorShowsExample(t *testing.T) {
	var stderr strings.Builder
	Main([]string{"run", "--metrics-addr=", "--output-dir=" + t.TempDir(), "--pyroscope-url=grafana-host:4040"}, &strings.Builder{}, &stderr)
	if want := "e.g. http://pyroscope:4040"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not show %q", stderr.String(), want)
	}
}

// TestGoodFlagsPassCheck: a full set of good values passes the check (run
// itself is not started: nothing loads).
func TestGoodFlagsPassCheck(t *testing.T) {
	tmp := t.TempDir()
	lib := filepath.Join(tmp, "libslurmscope_inject.so")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fs, f := runFlagSet(t)
	if err := fs.Parse([]string{
		"--pyroscope-url=https://pyroscope.example.org:4040/prefix", "--pyroscope-timeout=10s",
		"--prometheus-remote-write-url=http://prometheus:9090/api/v1/write", "--prometheus-remote-write-interval=30s",
		"--spool-max-bytes=268435456", "--remote-write-spool-max-bytes=67108864",
		"--output-dir=" + filepath.Join(tmp, "out"), "--output-max-bytes=10GiB", "--output-retention=7d",
		"--sample-rate=97", "--upload-interval=15s", "--rescan-interval=500ms", "--gpu-interval=5s",
		"--host-metrics-interval=10s", "--gpu-inject-lib=" + lib, "--metrics-addr=127.0.0.1:0",
		// 0 documented as "the default" / "no bound".
		"--memory-budget-bytes=0", "--memory-budget-job-bytes=0",
		"--pyroscope-reject-older-than=0s", "--pyroscope-reject-newer-than=0s",
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
}
