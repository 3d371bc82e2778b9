package service

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
)

// events records what the fakes did, in order.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// fakeKind opens a fakeService named name, nothing when off, or fails.
type fakeKind struct {
	ev       *events
	name     string
	off      bool
	openErr  error
	runErr   error // returned by Run at once, before ctx is done
	fallback bool
}

func (k *fakeKind) Flags(*flag.FlagSet) {}
func (k *fakeKind) Check() error        { return nil }
func (k *fakeKind) Open(Env) (Service, error) {
	if k.openErr != nil {
		return nil, k.openErr
	}
	if k.off {
		return nil, nil
	}
	k.ev.add("open " + k.name)
	return &fakeService{k: k}, nil
}

// fallbackKind is a fakeKind that also opens as a fallback.
type fallbackKind struct{ fakeKind }

func (k *fallbackKind) OpenFallback(Env) (Service, error) {
	k.ev.add("fallback " + k.name)
	return &fakeService{k: &k.fakeKind}, nil
}

type fakeService struct{ k *fakeKind }

func (s *fakeService) Run(ctx context.Context) error {
	if s.k.runErr != nil {
		return s.k.runErr
	}
	<-ctx.Done()
	s.k.ev.add("stop " + s.k.name)
	return ctx.Err()
}

func (s *fakeService) Close() error {
	s.k.ev.add("close " + s.k.name)
	return nil
}

var quiet = Env{Log: slog.New(slog.DiscardHandler)}

// TestGroupStopsInReverse: services open in order, and stop and close in
// reverse, each after the one opened after it has returned; a kind that is
// off opens nothing.
func TestGroupStopsInReverse(t *testing.T) {
	ev := &events{}
	g, err := Open([]Kind{&fakeKind{ev: ev, name: "a"}, &fakeKind{ev: ev, name: "off", off: true}, &fakeKind{ev: ev, name: "b"}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(g.Services()); n != 2 {
		t.Fatalf("%d services, want 2", n)
	}
	g.Start()
	if err := g.Stop(); err != nil {
		t.Fatalf("Stop: %v (a service stopped by Stop is no error)", err)
	}
	want := []string{"open a", "open b", "stop b", "close b", "stop a", "close a"}
	if got := ev.get(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if err := g.Stop(); err != nil || len(ev.get()) != len(want) {
		t.Errorf("a second Stop did something: %v, %q", err, ev.get())
	}
}

// TestGroupOpenErrorClosesOpened: a kind that fails to open closes what
// opened before it, and nothing runs.
func TestGroupOpenErrorClosesOpened(t *testing.T) {
	ev := &events{}
	bad := errors.New("--x: bad")
	_, err := Open([]Kind{&fakeKind{ev: ev, name: "a"}, &fakeKind{ev: ev, name: "b", openErr: bad}}, quiet)
	if !errors.Is(err, bad) {
		t.Fatalf("Open: %v, want %v", err, bad)
	}
	if got, want := ev.get(), []string{"open a", "close a"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestGroupFallback: the first fallback kind opens only where no kind
// opened anything.
func TestGroupFallback(t *testing.T) {
	ev := &events{}
	mk := func(aOff bool) []Kind {
		return []Kind{&fakeKind{ev: ev, name: "a", off: aOff},
			&fallbackKind{fakeKind{ev: ev, name: "dir", off: true}},
			&fallbackKind{fakeKind{ev: ev, name: "second", off: true}}}
	}
	g, err := Open(mk(false), quiet)
	if err != nil || len(g.Services()) != 1 {
		t.Fatalf("with a: %v, %d services", err, len(g.Services()))
	}
	g.Stop()
	g, err = Open(mk(true), quiet)
	if err != nil || len(g.Services()) != 1 {
		t.Fatalf("without a: %v, %d services", err, len(g.Services()))
	}
	g.Stop()
	want := []string{"open a", "close a", "fallback dir", "close dir"}
	if got := ev.get(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestGroupEarlyStop: a service whose Run fails is logged at once, the
// others run on, and Stop returns its error.
func TestGroupEarlyStop(t *testing.T) {
	ev := &events{}
	var log strings.Builder
	var mu sync.Mutex
	logged := make(chan struct{}, 1)
	env := Env{Log: slog.New(slog.NewTextHandler(&lockedWriter{&mu, &log, logged}, nil))}
	failed := errors.New("spool failed under it")
	g, err := Open([]Kind{&fakeKind{ev: ev, name: "a", runErr: failed}, &fakeKind{ev: ev, name: "b"}}, env)
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	<-logged // before Stop, which would make any return look asked for
	if err := g.Stop(); !errors.Is(err, failed) {
		t.Fatalf("Stop: %v, want %v", err, failed)
	}
	if got, want := ev.get(), []string{"open a", "open b", "stop b", "close b", "close a"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(log.String(), "stopped early") || !strings.Contains(log.String(), failed.Error()) {
		t.Errorf("log %q does not say a stopped early", log.String())
	}
}

// TestGroupNeverStarted: Stop closes services that never ran.
func TestGroupNeverStarted(t *testing.T) {
	ev := &events{}
	g, err := Open([]Kind{&fakeKind{ev: ev, name: "a"}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	if got, want := ev.get(), []string{"open a", "close a"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// lockedWriter collects a log and signals each write.
type lockedWriter struct {
	mu      *sync.Mutex
	b       *strings.Builder
	written chan struct{}
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.written <- struct{}{}:
	default:
	}
	return w.b.Write(p)
}
