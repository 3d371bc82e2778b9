package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	st, err := ParseStat([]byte("705 (a) (b\nc) S 1 705 705 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 5005 1000000 100 18446744073709551615\n"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != "a) (b\nc" || st.State != 'S' || st.PPID != 1 || st.Flags != 4194560 || st.StartTime != 5005 || st.Exiting() {
		t.Fatalf("got %+v", st)
	}
	for _, exiting := range []string{"1 (x) S 1 1 1 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 1 0 5 0", "1 (x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0"} {
		if st, err := ParseStat([]byte(exiting)); err != nil || !st.Exiting() {
			t.Errorf("ParseStat(%q) = %+v, %v: not exiting", exiting, st, err)
		}
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2 3", "1 (x) S one 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5 0"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) accepted", bad)
		}
	}
}

func TestParseStatusUID(t *testing.T) {
	uid, err := ParseStatusUID([]byte("Name:\tx\nUid:\t1001\t0\t0\t0\n"))
	if err != nil || uid != 1001 {
		t.Fatalf("uid %d, %v", uid, err)
	}
	if _, err := ParseStatusUID([]byte("Name:\tx\n")); err == nil {
		t.Error("no Uid line accepted")
	}
	if _, err := ParseStatusUID([]byte("Uid:\t-1\n")); err == nil {
		t.Error("negative uid accepted")
	}
}

func TestScanEnviron(t *testing.T) {
	long := strings.Repeat("v", 100<<10)
	in := "A=1\x00JUNK=" + strings.Repeat("x", 1<<20) + "\x00B=" + long + "\x00A=second\x00noequals\x00C=3"
	got, err := ScanEnviron(strings.NewReader(in), "A", "B", "C", "D")
	if err != nil {
		t.Fatal(err)
	}
	if got["A"] != "1" || got["C"] != "3" || len(got["B"]) != maxEnvValue || !strings.HasPrefix(long, got["B"]) {
		t.Fatalf("got A=%q C=%q len(B)=%d", got["A"], got["C"], len(got["B"]))
	}
	if _, ok := got["D"]; ok {
		t.Error("D invented")
	}
}

func TestVanishedProcessIsErrGone(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := New(root)
	for name, f := range map[string]func() error{
		"stat":    func() error { _, err := p.Stat(42); return err },
		"cgroup":  func() error { _, err := p.Cgroup(42); return err },
		"status":  func() error { _, err := p.UID(42); return err },
		"environ": func() error { _, err := p.Environ(42, "A"); return err },
	} {
		if err := f(); !errors.Is(err, ErrGone) {
			t.Errorf("%s: %v, want ErrGone", name, err)
		}
	}
}

func TestPIDsSkipsNonProcesses(t *testing.T) {
	root := t.TempDir()
	for _, n := range []string{"1", "42", "self", "0042", "-1", "uptime"} {
		if err := os.MkdirAll(filepath.Join(root, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pids, err := New(root).PIDs()
	if err != nil || len(pids) != 2 {
		t.Fatalf("pids %v, %v", pids, err)
	}
}

func TestCgroupTooLarge(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "7")
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, "cgroup"), []byte(strings.Repeat("0::/a\n", 20000)), 0o644)
	if _, err := New(root).Cgroup(7); err == nil || errors.Is(err, ErrGone) {
		t.Fatalf("oversized cgroup file: %v", err)
	}
}

func TestParseStatus(t *testing.T) {
	st := ParseStatus([]byte("Name:\tpython3\nUid:\t1001\t1001\t1001\t1001\nNSpid:\t4242\t7\n"), 4242)
	if st.UID != 1001 || st.NSpid != 7 {
		t.Errorf("got %+v", st)
	}
	// An old kernel has no NSpid: the pid is its own; no Uid: unknown.
	if st := ParseStatus([]byte("Name:\tx\nNSpid:\tjunk\n"), 9); st.UID != -1 || st.NSpid != 9 {
		t.Errorf("got %+v", st)
	}
}

func TestStartFromBoottime(t *testing.T) {
	for _, tc := range []struct{ ns, want uint64 }{
		{0, 0},
		{9_999_999, 0}, // truncates, as the kernel's nsec_to_clock_t does
		{10_000_000, 1},
		{1_234_567_890, 123},
		{86400 * 1e9, 8_640_000}, // one day of uptime
		{^uint64(0), ^uint64(0) / 10_000_000},
	} {
		if got := StartFromBoottime(tc.ns); got != tc.want {
			t.Errorf("StartFromBoottime(%d) = %d, want %d", tc.ns, got, tc.want)
		}
	}
}

// The kernel's field 22 and the conversion of the boot-time clock agree for
// this very process (within the tick the two reads can straddle).
func TestIDOfALiveProcess(t *testing.T) {
	id, err := New("").ID(os.Getpid())
	if err != nil || id.PID != os.Getpid() || id.Start == 0 {
		t.Fatalf("%+v, %v", id, err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	if now := StartFromBoottime(uint64(ts.Nano())); id.Start > now {
		t.Errorf("started at tick %d, after now (%d)", id.Start, now)
	}
}
