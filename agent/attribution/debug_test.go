package attribution

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/cgroup"
)

// TestDebugLinesSayWhy: at debug level, each process placed in a job says
// which job and why (its cgroup), each look-alike says why it is refused,
// once: a rescan of what the cache knows says nothing again.
func TestDebugLinesSayWhy(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := newFixtureResolver(t, "testdata/proc", func(o *Options) { o.Log = log })
	if _, err := r.Scan(); err != nil {
		t.Fatal(err)
	}
	var inJob, refused int
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		switch {
		case strings.Contains(l, `msg="process in a job"`):
			inJob++
			if !strings.Contains(l, " job=") || !strings.Contains(l, " why=cgroup cgroup=") {
				t.Errorf("a job's process without its job or why: %s", l)
			}
		case strings.Contains(l, `msg="process refused: its cgroup looks like Slurm's but is not; in no job"`):
			refused++
			if !strings.Contains(l, " reason="+cgroup.ReasonOutside+" ") {
				t.Errorf("a refusal without its reason: %s", l)
			}
		}
	}
	if inJob == 0 || refused != 5 {
		t.Errorf("%d processes in jobs and %d refused said, want some and 5 (the look-alikes):\n%s", inJob, refused, b.String())
	}
	b.Reset()
	if _, err := r.Scan(); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Errorf("a rescan said again what was known:\n%s", b.String())
	}
}
