package python

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A batch that never returns stalls its key: the caller gets errStalled,
// the key's later batches are refused without running, other keys run,
// and once the stuck batch returns the key runs again.
func TestGateStuckKey(t *testing.T) {
	g := &gate{timeout: 20 * time.Millisecond}
	release := make(chan struct{})
	if err := g.run("a", func() { <-release }); !errors.Is(err, errStalled) {
		t.Fatalf("stuck batch: %v, want errStalled", err)
	}
	ran := false
	if err := g.run("a", func() { ran = true }); !errors.Is(err, errStuck) || ran {
		t.Fatalf("batch of the stuck key: %v (ran %v), want refused", err, ran)
	}
	if err := g.run("b", func() {}); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if st := g.stats(); st.stalls != 1 || st.refused != 1 || st.stuck != 1 {
		t.Errorf("stats %+v, want 1 stall, 1 refused, 1 stuck", st)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); g.stats().stuck != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the key stays stuck after its batch returned")
		}
	}
	if err := g.run("a", func() {}); err != nil {
		t.Errorf("after the stuck batch returned: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.lanes) != 0 {
		t.Errorf("%d lanes left with nothing running", len(g.lanes))
	}
}

// One batch per key at a time, however many callers: a key never has two
// batches in the kernel, so a job can hold at most one stuck read.
func TestGateOneBatchPerKey(t *testing.T) {
	g := &gate{timeout: 50 * time.Millisecond}
	var in, most atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.run("a", func() {
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
				in.Add(-1)
			})
		}()
	}
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d batches of one key ran at once, want 1", most.Load())
	}
	close(release)
}

func TestGatePanic(t *testing.T) {
	g := &gate{timeout: time.Second}
	err := g.run("a", func() { panic("boom") })
	var pe *panicError
	if !errors.As(err, &pe) || pe.v != "boom" || len(pe.stack) == 0 {
		t.Fatalf("panic: %v", err)
	}
	if err := g.run("a", func() {}); err != nil {
		t.Errorf("after a panic: %v", err)
	}
}
