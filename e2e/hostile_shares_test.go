package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// forkStorm forks without end, in rounds: 0.5 s of CPU (so that it is
// sampled and set up before its children are), 300 children that wait
// (past its share of live forks, whatever a fork costs on the host: 6 ms
// where page faults trap to a hypervisor), lets those go, then 3000
// children that _exit at once. Each child it holds closes the pipe ends
// of the others, so that its parent's death frees them all.
const forkStorm = `import os, time
print("ready", flush=True)
while True:
    t = time.process_time()
    while time.process_time() - t < 0.5:
        pass
    held = []
    for _ in range(300):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(w)
            for _, hw in held:
                os.close(hw)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        held.append((pid, w))
    for pid, w in held:
        os.close(w)
        os.waitpid(pid, 0)
    for _ in range(3000):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
`

// manyPythonStacks runs through ever new Python stacks: random chains of
// 200 functions, nearly every sample a stack of its own.
const manyPythonStacks = `import random
fs = []
for i in range(200):
    exec(f"def f{i}(d, r):\n    if d == 0:\n        return sum(range(50))\n    return fs[r.randrange(200)](d - 1, r)", globals())
    fs.append(globals()[f"f{i}"])
r = random.Random()
print("ready", flush=True)
while True:
    fs[r.randrange(200)](r.randrange(1, 12), r)
`

// deepHugeCode recurses 60 deep through functions whose code objects
// have line tables of tens of KiB (thousands of lines before the call),
// so that each of its stacks is costly to resolve.
const deepHugeCode = `body = "\n".join(f"    x{j} = {j}" for j in range(4000))
fs = []
for i in range(8):
    exec(f"def deep{i}(d):\n{body}\n    if d == 0:\n        return sum(range(100))\n    return fs[d % 8](d - 1)", globals())
    fs.append(globals()[f"deep{i}"])
print("ready", flush=True)
while True:
    fs[0](60)
`

// lateInnocent is the innocent job's Python process started once the
// attack is under way: it must be set up like any.
const lateInnocent = `def late_innocent():
    while True:
        sum(range(1000))
print("ready", flush=True)
late_innocent()
`

// testSharedTables is TestHostileJobs/SharedTables: one job attacks the
// kernel tables every job shares, and the agent's time. Its Python fork storm (300
// held children and 3000 fork+_exit a round, without end) would fill the
// process tables with entries for children that never exec; two Python
// processes through ever new stacks would fill the interpreter stacks
// map; nine processes of 8300 executable mappings each would fill the
// unwinder's LPM map; one recurses 60 deep through functions with line
// tables of tens of KiB, whose resolution once cost 17 ms a stack. The
// innocent job of another user beside it keeps its
// Python frames interval after interval, a Python process it starts
// during the attack is set up, /metrics answers within 2 s throughout, and
// only the attacker's job is refused: forks past its set-up process's
// share, interpreter stacks past its share of a generation, LPM entries
// past its share.
func testSharedTables(t *testing.T, s *hostileSetup) {
	const py = "/usr/bin/python3.11" // Debian's, as the stack tests require
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("Debian's python3.11 is required (scripts/deps.sh installs it): %v", err)
	}
	split := filepath.Join(s.work, "split.py")
	b, err := os.ReadFile("../internal/testenv/workloads/python/split.py")
	must(t, err)
	must(t, os.WriteFile(split, b, 0o644))

	// 499 Hz: the two processes' distinct stacks pass the attacker's
	// share of a generation's interpreter stacks (an eighth of 4096) in
	// one 2 s interval.
	h := s.start(t, "--sample-rate", "499")
	h.spawnPython(h.innocentJob, s.innocent, py, split, "3600")
	h.startAgent()

	h.spawnPython(h.attackerJob, s.attacker, py, "-c", forkStorm)
	h.spawnPython(h.attackerJob, s.attacker, py, "-c", manyPythonStacks)
	h.spawnPython(h.attackerJob, s.attacker, py, "-c", manyPythonStacks)
	h.spawnPython(h.attackerJob, s.attacker, py, "-c", deepHugeCode)
	for range 9 {
		h.attack("mappings", "8300")
	}
	h.waitCounted("agent_stack_forks_refused_total", "")
	h.waitCounted("agent_cpu_samples_lost_total", `reason="interpreter_share"`)
	h.waitCounted("agent_unwind_share_refused_total", `share="mappings",slurm_job_id="`+h.attackerJob.ID+`"`)

	h.spawnPython(h.innocentJob, s.innocent, py, "-c", lateInnocent)
	start := h.intervalsWith(h.innocentJob, "process_cpu", "hot_a")
	deadline := time.Now().Add(90 * time.Second)
	var took []time.Duration
	for h.intervalsWith(h.innocentJob, "process_cpu", "hot_a") < start+3 || h.intervalsWith(h.innocentJob, "process_cpu", "late_innocent") < 2 {
		if time.Now().After(deadline) {
			h.ag.logMetrics(t, "slurmscope_agent")
			t.Fatalf("in 90 s of attack the innocent job's Python frames were in %d more intervals (want 3), its new process's in %d (want 2)",
				h.intervalsWith(h.innocentJob, "process_cpu", "hot_a")-start, h.intervalsWith(h.innocentJob, "process_cpu", "late_innocent"))
		}
		took = append(took, h.scrapeWithin(2*time.Second).Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("/metrics answered %d scrapes during the attack, in %v", len(took), took)
	h.run()

	innocent := `slurm_job_id="` + h.innocentJob.ID + `"`
	if n := h.counter("agent_unwind_share_refused_total", innocent); n != 0 {
		t.Errorf("the innocent job was refused %v of its unwinder share", n)
	}
	if n := h.counter("agent_cpu_maps_full_total", innocent); n != 0 {
		t.Errorf("the innocent job is named for %v full sampler maps", n)
	}
	t.Logf("forks refused %v, interpreter stacks over the share %v, attacker's LPM entries refused %v, frames over the resolution budget %v",
		h.counter("agent_stack_forks_refused_total", ""), h.counter("agent_cpu_samples_lost_total", `reason="interpreter_share"`),
		h.counter("agent_unwind_share_refused_total", `slurm_job_id="`+h.attackerJob.ID+`"`),
		h.counter("agent_interpreter_frames_total", `result="cpu_budget"`))
	h.stop()
}
