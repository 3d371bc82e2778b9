package e2e

import (
	"testing"
	"time"
)

// TestLaneSchedule: a lane admits one test at a time, both lanes run side
// by side, and an alone test waits until no lane test is running or still
// to run, and keeps the lanes out while it runs.
func TestLaneSchedule(t *testing.T) {
	var a, b testLane
	s := newLaneSchedule(&a, &b)
	s.register()
	s.register()
	s.register()

	entered := make(chan string, 4)
	go func() { leave := s.enterAlone(); entered <- "alone"; time.Sleep(20 * time.Millisecond); leave() }()
	leaveA := s.enter(&a)
	leaveB := s.enter(&b) // the other lane, beside a
	second := make(chan func())
	go func() { l := s.enter(&a); entered <- "a2"; second <- l }()
	// Neither the second test of lane a nor the alone test can enter.
	time.Sleep(20 * time.Millisecond)
	select {
	case e := <-entered:
		t.Fatalf("%s entered while lane a was busy", e)
	default:
	}
	leaveA()
	leaveB()
	if e := <-entered; e != "a2" {
		t.Fatalf("%s entered first, want the lane test still to run (a2)", e)
	}
	leaveA2 := <-second
	time.Sleep(20 * time.Millisecond)
	select {
	case e := <-entered:
		t.Fatalf("%s entered while a2 ran", e)
	default:
	}
	leaveA2()
	if e := <-entered; e != "alone" {
		t.Fatalf("got %s, want alone once the lanes drained", e)
	}
}
