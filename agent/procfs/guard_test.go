package procfs

import (
	"errors"
	"testing"
	"time"
)

// A job whose file I/O hangs costs its caller one timeout; its next calls
// are refused at once until the stuck one returns; other jobs are not
// affected at all.
func TestGuardBoundsAHungJob(t *testing.T) {
	g := &Guard{Timeout: 50 * time.Millisecond}
	release := make(chan struct{})
	if err := g.Do("job hung", func(func()) { <-release }); !errors.Is(err, ErrStalled) {
		t.Fatalf("hung call: %v, want ErrStalled", err)
	}
	ran := false
	if err := g.Do("job hung", func(func()) { ran = true }); !errors.Is(err, ErrStalled) || ran {
		t.Fatalf("a call of the stuck job: %v (ran %v), want refused without running", err, ran)
	}
	if err := g.Do("job other", func(func()) { ran = true }); err != nil || !ran {
		t.Fatalf("another job's call: %v (ran %v)", err, ran)
	}
	if st := g.Stats(); st.Stalls != 1 || st.Refused != 1 || st.Stuck != 1 {
		t.Errorf("stats %+v", st)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); g.Stats().Stuck != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the stuck call returned but its job stays refused")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ran = false
	if err := g.Do("job hung", func(func()) { ran = true }); err != nil || !ran {
		t.Fatalf("after the stuck call returned: %v (ran %v)", err, ran)
	}
}

func TestGuardReraisesPanics(t *testing.T) {
	g := &Guard{}
	defer func() {
		if p := recover(); p != "boom" {
			t.Fatalf("recovered %v, want boom", p)
		}
	}()
	g.Do("k", func(func()) { panic("boom") })
}

func TestNilGuardRunsInLine(t *testing.T) {
	var g *Guard
	ran := false
	if err := g.Do("k", func(func()) { ran = true }); err != nil || !ran {
		t.Fatal(err)
	}
}

// Work that keeps reporting progress is waited for however long it takes.
func TestGuardWaitsForProgress(t *testing.T) {
	g := &Guard{Timeout: 30 * time.Millisecond}
	err := g.Do("job big", func(progress func()) {
		for range 10 {
			time.Sleep(10 * time.Millisecond)
			progress()
		}
	})
	if err != nil {
		t.Fatalf("a call that made progress for 3 timeouts: %v", err)
	}
}
