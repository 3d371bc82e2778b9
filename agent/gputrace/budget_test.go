package gputrace

import (
	"fmt"
	"testing"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// jobOf puts pid 1 in job "victim" and every other pid in job "attacker".
func jobOf(id procfs.ID) string {
	if id.PID == 1 {
		return budget.JobOwner("victim")
	}
	return budget.JobOwner("attacker")
}

// TestForgedRecordsStayInTheirJobsShare: a job that calls the record
// marker with forged records (any name id, device and duration) grows the
// joiner only up to its share of the memory budget; past it, its records
// fold into one row per device, its GPU time stays exact, and the other
// job's kernels, names and stacks are untouched.
func TestForgedRecordsStayInTheirJobsShare(t *testing.T) {
	const share = 1 << 20
	b := budget.New(budget.Options{Total: 8 * share, JobShare: share})
	lim := testLimits()
	lim.maxNamesPerProcess, lim.maxNameBytes, lim.maxLaunchesPerProcess, lim.maxLaunches = 1<<20, 1<<30, 1<<20, 1<<20
	lim.budget, lim.owner = b, jobOf
	j := newJoiner(lim)

	// The victim: two kernels, one launched from a sampled stack.
	j.name(nameEv(1, 5, "gemm"))
	j.name(nameEv(1, 5, "relu"))
	j.launch(launchEv(1, 5, 1, "gemm", 0xa, 0xb), t0)
	j.records(hdr(1, 5), []kernelRecord{rec(1, "gemm", 100, true), rec(2, "relu", 50, false)}, t0)

	// The attacker: 200,000 records of distinct forged kernels, two devices.
	var total uint64
	var recs []kernelRecord
	for i := range 200_000 {
		r := kernelRecord{correlationID: uint64(i), startNs: 0, endNs: uint64(i%1000 + 1), nameID: uint64(i) * 0x9e3779b97f4a7c15,
			device: uint32(i % 2), gpuInstance: GPUInstanceNone}
		total += r.duration()
		recs = append(recs, r)
		if len(recs) == 64 {
			j.records(hdr(2, 9), recs, t0)
			recs = recs[:0]
		}
	}
	if got := b.Held(budget.JobOwner("attacker")); got > share {
		t.Fatalf("the attacker holds %d bytes, over its share %d", got, share)
	}
	if j.st.FoldedRecords == 0 {
		t.Fatal("nothing folded: the test does not reach the share")
	}

	out := j.drain(t0, always)
	var attackerTime uint64
	rows, folded := 0, 0
	victim := map[string]Sample{}
	for _, s := range out {
		switch s.Proc.PID {
		case 1:
			victim[s.Kernel] = s
		case 2:
			rows++
			attackerTime += s.GPUTime
			if s.Kernel == OverBudgetFrame {
				folded++
				if !s.Unsampled || s.User != nil {
					t.Errorf("folded row %+v has a stack", s)
				}
			}
		}
	}
	if attackerTime != total {
		t.Errorf("the attacker's GPU time %d, want exactly %d", attackerTime, total)
	}
	if folded != 2 {
		t.Errorf("%d folded rows, want one per device (2)", folded)
	}
	if max := share/rowBytes + 2; rows > max {
		t.Errorf("%d rows for the attacker, want at most %d", rows, max)
	}
	if g := victim["gemm"]; g.GPUTime != 100 || len(g.User) != 2 {
		t.Errorf("victim's gemm %+v", g)
	}
	if r := victim["relu"]; r.GPUTime != 50 || r.KernelRaw != "relu" {
		t.Errorf("victim's relu %+v", r)
	}
	// Drained: the rows' bytes are returned.
	if got := b.Held(budget.JobOwner("attacker")); got > 2*chargeStep {
		t.Errorf("after the drain the attacker still holds %d bytes", got)
	}
}

// TestRowsPerProcessAreCapped: without a budget too, one process cannot
// make a drain of more than maxRowsPerProcess rows.
func TestRowsPerProcessAreCapped(t *testing.T) {
	j := newJoiner(testLimits())
	var recs []kernelRecord
	for i := range maxRowsPerProcess + 100 {
		recs = append(recs, kernelRecord{correlationID: uint64(i), endNs: 1, nameID: uint64(i) + 1, gpuInstance: GPUInstanceNone})
	}
	j.records(hdr(2, 9), recs, t0)
	out := j.drain(t0, always)
	if len(out) != maxRowsPerProcess+1 {
		t.Errorf("%d rows, want %d and the folded one", len(out), maxRowsPerProcess)
	}
	var sum uint64
	for _, s := range out {
		sum += s.GPUTime
	}
	if sum != uint64(len(recs)) {
		t.Errorf("time %d, want %d", sum, len(recs))
	}
}

// TestLaunchesAndNamesOverTheShareAreDropped: a job's launches and names
// past its share are dropped and counted; its records still count.
func TestLaunchesAndNamesOverTheShareAreDropped(t *testing.T) {
	b := budget.New(budget.Options{Total: 1 << 20, JobShare: 2 * chargeStep})
	lim := testLimits()
	lim.maxLaunchesPerProcess, lim.maxLaunches, lim.maxNamesPerProcess, lim.maxNameBytes = 1<<20, 1<<20, 1<<20, 1<<30
	lim.budget, lim.owner = b, jobOf
	j := newJoiner(lim)
	for i := range 2000 {
		j.name(nameEv(2, 9, fmt.Sprintf("forged_kernel_%06d_with_a_long_name_to_cost_bytes", i)))
		j.launch(launchEv(2, 9, uint64(i), "k", 1, 2, 3, 4, 5, 6, 7, 8), t0)
	}
	if j.st.OverBudgetNames == 0 || j.st.OverBudgetLaunches == 0 {
		t.Fatalf("stats %+v: nothing dropped", j.st)
	}
	if got := b.Held(budget.JobOwner("attacker")); got > 2*chargeStep {
		t.Errorf("holds %d over its share", got)
	}
	gone := func(procfs.ID) bool { return false }
	j.drain(t0, gone) // active this interval: kept
	j.drain(t0, gone) // idle and gone: forgotten
	if got := b.Held(budget.JobOwner("attacker")); got != 0 {
		t.Errorf("a forgotten process still holds %d", got)
	}
}
