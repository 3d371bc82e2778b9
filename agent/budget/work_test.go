package budget

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestWorkIsATokenBucketPerOwner(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	w := NewWork(WorkOptions{Burst: 100, Rate: 10, Now: c.now})
	if !w.Take("job a", 100) {
		t.Fatal("the burst was refused")
	}
	if w.Take("job a", 1) {
		t.Fatal("an empty bucket gave a byte")
	}
	if !w.Take("job b", 100) {
		t.Fatal("another job's bucket is its own")
	}
	c.t = c.t.Add(3 * time.Second)
	if !w.Take("job a", 30) || w.Take("job a", 1) {
		t.Fatal("refill: want exactly rate*seconds")
	}
	c.t = c.t.Add(time.Hour)
	if w.Take("job a", 101) {
		t.Fatal("the bucket holds more than its burst")
	}
	if w.Denied() != 3 {
		t.Errorf("denied = %d, want 3", w.Denied())
	}
	var none *Work
	if !none.Take("x", 1<<40) {
		t.Error("a nil Work refuses")
	}
}

func TestWorkReaderAt(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	w := NewWork(WorkOptions{Burst: 10, Rate: 1, Now: c.now})
	r := w.ReaderAt("job a", bytes.NewReader(make([]byte, 100)))
	buf := make([]byte, 8)
	if n, err := r.ReadAt(buf, 0); n != 8 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	if r.Denied() {
		t.Fatal("denied before any refusal")
	}
	if _, err := r.ReadAt(buf, 8); !errors.Is(err, ErrWorkLimit) || !r.Denied() {
		t.Fatalf("second read: %v, want ErrWorkLimit", err)
	}
	var pass io.ReaderAt = (*Work)(nil).ReaderAt("x", bytes.NewReader(make([]byte, 8)))
	if n, err := pass.ReadAt(buf, 0); n != 8 || err != nil {
		t.Fatalf("a nil Work's reader: %d, %v", n, err)
	}
}

func TestWorkSpendGoesIntoDebt(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	w := NewWork(WorkOptions{Burst: 100, Rate: 10, Now: c.now})
	w.Spend("job a", 150)
	c.t = c.t.Add(4 * time.Second) // -50 + 40
	if w.Take("job a", 1) {
		t.Fatal("a bucket in debt gave a byte")
	}
	c.t = c.t.Add(2 * time.Second)
	if !w.Take("job a", 10) {
		t.Fatal("the debt was not paid off by refilling")
	}
	w.Spend("job b", 1<<40)
	c.t = c.t.Add(20 * time.Second)
	if !w.Take("job b", 100) {
		t.Fatal("debt is bounded by one burst")
	}
}

func TestWorkForgetsFullBuckets(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	w := NewWork(WorkOptions{Burst: 10, Rate: 1000, Now: c.now})
	for i := range 1 << 14 {
		w.Take(UserOwner(i), 1)
	}
	c.t = c.t.Add(time.Second)
	w.Take("job new", 1)
	if n := len(w.owners); n > 2 {
		t.Errorf("%d buckets kept, want the refilled ones forgotten", n)
	}
}
