package attribution

import (
	"testing"

	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/procfs/procfstest"
)

// BenchmarkCachedLookup is the per-sample path: (pid, start time) -> job.
func BenchmarkCachedLookup(b *testing.B) {
	r := newFixtureResolver(b, "testdata/proc", nil)
	p, err := r.Resolve(302)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if q, ok := r.Cached(procfs.ID{PID: 302, Start: p.Start}); !ok || q.Job == nil {
			b.Fatal("miss")
		}
	}
}

// BenchmarkColdLookup resolves a process the resolver has never seen: stat,
// cgroup, status, and the environment of its job's first task.
func BenchmarkColdLookup(b *testing.B) {
	u := fixtureUsers(b)
	tree := cgrouptest.Mirror(b, "testdata/proc")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r := New(Options{Proc: procfs.New("testdata/proc"), Users: u, HostName: "node-a", Cgroups: tree})
		if p, err := r.Resolve(301); err != nil || !p.InJob() {
			b.Fatal(p, err)
		}
	}
}

// BenchmarkScan10k is a first scan of a node with 10,000 processes, and a
// steady-state rescan of the same node; -ranks with Options.Ranks, where
// the first scan reads every job process's environment and the rescan
// none.
func BenchmarkScan10k(b *testing.B) {
	root := procfstest.SyntheticNode(b, 10000)
	tree := cgrouptest.Mirror(b, root)
	for _, ranks := range []bool{false, true} {
		suffix := map[bool]string{false: "", true: "-ranks"}[ranks]
		b.Run("cold"+suffix, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r := New(Options{Proc: procfs.New(root), Users: fixtureUsers(b), HostName: "n", Cgroups: tree, Ranks: ranks})
				procs, err := r.Scan()
				if err != nil || len(procs) != 10000 {
					b.Fatal(len(procs), err)
				}
			}
		})
		b.Run("warm"+suffix, func(b *testing.B) {
			r := New(Options{Proc: procfs.New(root), Users: fixtureUsers(b), HostName: "n", Cgroups: tree, Ranks: ranks})
			if _, err := r.Scan(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := r.Scan(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
