// Package servicetest holds what tests of a service.Kind share.
package servicetest

import (
	"context"
	"flag"
	"io"
	"testing"

	"github.com/slurmscope/slurmscope/agent/service"
)

// Parse registers k's flags on a flag set of their own, parses args and
// returns k.
func Parse[K service.Kind](t testing.TB, k K, args ...string) K {
	t.Helper()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	k.Flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return k
}

// Run runs svc on a goroutine until stop, which fails t if Run returned an
// error, and closes svc where it is an io.Closer.
func Run(t testing.TB, svc service.Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if c, ok := svc.(io.Closer); ok {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	}
}
