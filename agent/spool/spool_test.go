package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var quiet = slog.New(slog.DiscardHandler)

func open(t *testing.T, dir string, max int64) *Spool {
	t.Helper()
	s, err := Open(dir, max, WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustAppend(t *testing.T, s *Spool, p string) {
	t.Helper()
	if err := s.Append([]byte(p)); err != nil {
		t.Fatalf("Append(%q): %v", p, err)
	}
}

// drain takes and acks every entry, returning the payloads in order.
func drain(t *testing.T, s *Spool) []string {
	t.Helper()
	var got []string
	for {
		e, err := s.Peek()
		if errors.Is(err, ErrEmpty) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(e.Payload))
		if err := s.Ack(e.Seq); err != nil {
			t.Fatal(err)
		}
	}
}

func eq(t *testing.T, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestOrder(t *testing.T) {
	s := open(t, t.TempDir(), 1<<20)
	for i := range 10 {
		mustAppend(t, s, fmt.Sprint("p", i))
	}
	// Peek without Ack returns the same head again.
	a, _ := s.Peek()
	b, _ := s.Peek()
	if a.Seq != b.Seq || string(a.Payload) != "p0" {
		t.Fatalf("peek not stable: %v %v", a, b)
	}
	eq(t, drain(t, s), []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9"})
	if st := s.Stats(); st.Entries != 0 || st.Bytes != 0 || st.Acked != 10 || st.Appended != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRestartReplaysInOrder(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	for i := range 5 {
		mustAppend(t, s, fmt.Sprint("p", i))
	}
	e, _ := s.Peek()
	s.Ack(e.Seq)
	// Delivered but not acked before the "crash": replayed after it.
	if _, err := s.Peek(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Append([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}

	s2 := open(t, dir, 1<<20)
	mustAppend(t, s2, "p5")
	eq(t, drain(t, s2), []string{"p1", "p2", "p3", "p4", "p5"})
}

// TestOneReaderPerDirectory: a second Open of a directory that is open is
// refused, in this process as from another, and succeeds once the first
// is closed; the lock file is no entry.
func TestOneReaderPerDirectory(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, 1<<20)
	mustAppend(t, a, "x")
	if b, err := Open(dir, 1<<20, WithLogger(quiet)); !errors.Is(err, ErrLocked) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	// Another process: flock(1) on the same file.
	if flock, err := exec.LookPath("flock"); err == nil {
		out, err := exec.Command(flock, "--nonblock", "--conflict-exit-code", "7", filepath.Join(dir, lockName), "true").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 {
			t.Errorf("flock(1) on the open spool: %v %s, want exit 7 (conflict)", err, out)
		}
	}
	a.Close()
	b := open(t, dir, 1<<20)
	eq(t, drain(t, b), []string{"x"})
}

func TestBoundDropsOldest(t *testing.T) {
	// Each 10-byte payload takes 22 bytes; 100 bytes hold four.
	s := open(t, t.TempDir(), 100)
	for i := range 7 {
		mustAppend(t, s, fmt.Sprintf("payload-%02d", i))
	}
	st := s.Stats()
	if st.DroppedOldest != 3 || st.DroppedBytes != 66 || st.Entries != 4 || st.Bytes != 88 {
		t.Fatalf("stats %+v", st)
	}
	eq(t, drain(t, s), []string{"payload-03", "payload-04", "payload-05", "payload-06"})

	big := bytes.Repeat([]byte("x"), 89)
	if err := s.Append(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized append: %v", err)
	}
	if st := s.Stats(); st.RejectedLarge != 1 || st.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Exactly the bound fits.
	if err := s.Append(big[:88]); err != nil {
		t.Fatal(err)
	}
}

func TestLeasedEntryIsNotEvicted(t *testing.T) {
	s := open(t, t.TempDir(), 100)
	for i := range 4 {
		mustAppend(t, s, fmt.Sprintf("payload-%02d", i))
	}
	head, _ := s.Peek() // being delivered
	mustAppend(t, s, "payload-04")
	// payload-01 went instead of the leased payload-00.
	if err := s.Ack(head.Seq); err != nil {
		t.Fatal(err)
	}
	eq(t, drain(t, s), []string{"payload-02", "payload-03", "payload-04"})
	if st := s.Stats(); st.DroppedOldest != 1 {
		t.Fatalf("stats %+v", st)
	}

	// The leased entry plus the new one cannot fit: the new one is refused.
	mustAppend(t, s, string(bytes.Repeat([]byte("a"), 50)))
	s.Peek()
	if err := s.Append(bytes.Repeat([]byte("b"), 50)); !errors.Is(err, ErrFull) {
		t.Fatalf("got %v, want ErrFull", err)
	}
	if st := s.Stats(); st.RejectedFull != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReopenWithSmallerBound(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1000)
	for i := range 5 {
		mustAppend(t, s, fmt.Sprintf("payload-%02d", i))
	}
	s.Close()
	s2 := open(t, dir, 50)
	if st := s2.Stats(); st.DroppedOldest != 3 {
		t.Fatalf("stats %+v", st)
	}
	eq(t, drain(t, s2), []string{"payload-03", "payload-04"})
}

func TestCorruptEntriesAreQuarantined(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<20)
	for i := range 5 {
		mustAppend(t, s, fmt.Sprintf("payload-%02d", i))
	}
	s.Close()
	// Sequence numbers start at 1, so entry n holds payload-(n-1).
	// Flip a payload byte of #2, truncate #3's header, truncate #4's payload,
	// and leave a temp file from an interrupted append.
	p := func(seq int) string { return filepath.Join(dir, fmt.Sprintf("%020d.entry", seq)) }
	b, _ := os.ReadFile(p(2))
	b[len(b)-1] ^= 0xff
	os.WriteFile(p(2), b, 0o640)
	os.WriteFile(p(3), []byte("SSP"), 0o640)
	b, _ = os.ReadFile(p(4))
	os.WriteFile(p(4), b[:len(b)-3], 0o640)
	os.WriteFile(filepath.Join(dir, ".tmp-00000000000000000006"), []byte("half"), 0o640)
	os.WriteFile(filepath.Join(dir, "README"), []byte("not ours"), 0o640)

	s2 := open(t, dir, 1<<20)
	mustAppend(t, s2, "payload-05")
	eq(t, drain(t, s2), []string{"payload-00", "payload-04", "payload-05"})
	if st := s2.Stats(); st.Corrupt != 3 {
		t.Fatalf("stats %+v", st)
	}
	q, _ := os.ReadDir(filepath.Join(dir, QuarantineDir))
	if len(q) != 3 {
		t.Fatalf("quarantine holds %d files, want 3", len(q))
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-00000000000000000006")); !os.IsNotExist(err) {
		t.Fatalf("temp file survived Open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Fatalf("a foreign file was touched: %v", err)
	}
}

func TestNextWaitsForAppend(t *testing.T) {
	s := open(t, t.TempDir(), 1<<20)
	got := make(chan string)
	go func() {
		e, err := s.Next(context.Background())
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(e.Payload)
	}()
	mustAppend(t, s, "late")
	if g := <-got; g != "late" {
		t.Fatalf("got %q", g)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Ack(1)
	if _, err := s.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	go func() { time.Sleep(time.Millisecond); s.Close() }()
	if _, err := s.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v", err)
	}
}

// TestConcurrentProducerConsumer: one producer and one consumer; with room
// for everything, the consumer sees every payload exactly once, in order.
func TestConcurrentProducerConsumer(t *testing.T) {
	s := open(t, t.TempDir(), 1<<20)
	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if err := s.Append([]byte(fmt.Sprint(i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := range n {
		e, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Payload) != fmt.Sprint(i) {
			t.Fatalf("entry %d: got %q", i, e.Payload)
		}
		s.Ack(e.Seq)
	}
	wg.Wait()
}

// TestRandomOpsAgainstModel drives the spool with random appends, peeks,
// acks, restarts and corruptions, and checks it against an in-memory model.
func TestRandomOpsAgainstModel(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			const max = 400
			s, err := Open(dir, max, WithoutFsync(), WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			type m struct {
				seq  uint64
				data string
				bad  bool // corrupted on disk: skipped by Peek, counted
			}
			var model []m
			var leased uint64
			var dropped, corrupt, large uint64
			bytesOf := func() (n int64) {
				for _, e := range model {
					n += int64(headerSize + len(e.data))
				}
				return n
			}
			next := uint64(1)
			for op := 0; op < 400; op++ {
				switch k := r.Intn(10); {
				case k < 5: // append
					data := fmt.Sprintf("%d-%s", op, bytes.Repeat([]byte("z"), r.Intn(120)))
					if r.Intn(40) == 0 {
						data = string(bytes.Repeat([]byte("L"), max))
					}
					size := int64(headerSize + len(data))
					err := s.Append([]byte(data))
					if size > max {
						if !errors.Is(err, ErrTooLarge) {
							t.Fatalf("op %d: oversized append: %v", op, err)
						}
						large++
						continue
					}
					full := false
					for bytesOf()+size > max {
						i := 0
						if len(model) > 0 && model[0].seq == leased {
							i = 1
						}
						if i >= len(model) {
							full = true
							break
						}
						model = append(model[:i], model[i+1:]...)
						dropped++
					}
					if full {
						if !errors.Is(err, ErrFull) {
							t.Fatalf("op %d: want ErrFull, got %v", op, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("op %d: %v", op, err)
					}
					model = append(model, m{seq: next, data: data})
					next++
				case k < 7: // peek
					for len(model) > 0 && model[0].bad {
						model = model[1:]
						corrupt++
					}
					e, err := s.Peek()
					if len(model) == 0 {
						if !errors.Is(err, ErrEmpty) {
							t.Fatalf("op %d: want empty, got %v", op, err)
						}
						leased = 0
						continue
					}
					if err != nil || e.Seq != model[0].seq || string(e.Payload) != model[0].data {
						t.Fatalf("op %d: peek got %d %.10q %v, want %d %.10q", op, e.Seq, e.Payload, err, model[0].seq, model[0].data)
					}
					leased = e.Seq
				case k < 9: // ack the head
					if len(model) > 0 && leased == model[0].seq {
						if err := s.Ack(leased); err != nil {
							t.Fatal(err)
						}
						model = model[1:]
						leased = 0
					}
				default: // restart, sometimes corrupting an entry first
					s.Close()
					leased = 0
					if len(model) > 0 && r.Intn(2) == 0 {
						i := r.Intn(len(model))
						p := filepath.Join(dir, fmt.Sprintf("%020d.entry", model[i].seq))
						b, _ := os.ReadFile(p)
						b[headerSize+r.Intn(len(b)-headerSize)] ^= 0x55
						os.WriteFile(p, b, 0o640)
						model[i].bad = true
					}
					if s, err = Open(dir, max, WithoutFsync(), WithLogger(quiet)); err != nil {
						t.Fatal(err)
					}
					// Numbering continues after the newest entry on disk.
					next = 1
					if len(model) > 0 {
						next = model[len(model)-1].seq + 1
					}
					// Counters restart with the process.
					dropped, large, corrupt = 0, 0, 0
				}
				if op%50 == 0 {
					st := s.Stats()
					if st.DroppedOldest != dropped || st.RejectedLarge != large || st.Corrupt != corrupt {
						t.Fatalf("op %d: stats %+v, model dropped %d large %d corrupt %d", op, st, dropped, large, corrupt)
					}
				}
			}
			var want []string
			for _, e := range model {
				if e.bad {
					corrupt++
				} else {
					want = append(want, e.data)
				}
			}
			eq(t, drain(t, s), want)
			if st := s.Stats(); st.Corrupt != corrupt {
				t.Fatalf("corrupt %d, model %d", st.Corrupt, corrupt)
			}
		})
	}
}
