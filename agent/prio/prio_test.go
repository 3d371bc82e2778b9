package prio

import (
	"testing"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// TestRaise: the goroutine that raised runs at Nice, and a goroutine that
// did not keeps the niceness it had.
func TestRaise(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	before := make(chan int)
	go func() { n, _ := Current(); before <- n }()
	base := <-before
	got := make(chan int)
	go func() {
		if err := Raise(); err != nil {
			t.Error(err)
		}
		n, _ := Current()
		got <- n
	}()
	if n := <-got; n != Nice {
		t.Errorf("raised thread at nice %d, want %d", n, Nice)
	}
	// The raised goroutine returned: its thread ended with it.
	for range 20 {
		go func() { n, _ := Current(); before <- n }()
		if n := <-before; n != base {
			t.Fatalf("another goroutine runs at nice %d, want %d", n, base)
		}
	}
}
