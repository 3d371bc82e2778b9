package cgroup

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseLayouts(t *testing.T) {
	hybridV1 := "12:pids:/\n11:freezer:/\n4:memory:/process_api/abc\n1:cpu:/\n"
	tests := []struct {
		name    string
		content string
		want    Location
	}{
		{"v2 task", hybridV1 + "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1\n",
			Location{InJob: true, JobID: "4242", Step: "0", Task: "1", UID: -1, Version: 2}},
		{"v2 batch", "0::/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0\n",
			Location{InJob: true, JobID: "7", Step: "batch", Task: "0", UID: -1, Version: 2}},
		{"v2 task_special", "0::/system.slice/slurmstepd.scope/job_7/step_extern/user/task_special\n",
			Location{InJob: true, JobID: "7", Step: "extern", Task: "special", UID: -1, Version: 2}},
		{"v2 slurmstepd leaf", "0::/system.slice/slurmstepd.scope/job_7/step_interactive/slurm\n",
			Location{InJob: true, JobID: "7", Step: "interactive", Stepd: true, UID: -1, Version: 2}},
		{"v2 multiple slurmd", "0::/system.slice/node-b_slurmstepd.scope/job_4300/step_0/user/task_0\n",
			Location{InJob: true, JobID: "4300", Step: "0", Task: "0", Node: "node-b", UID: -1, Version: 2}},
		{"v2 a container below the task", "0::/system.slice/slurmstepd.scope/job_12/step_3/user/task_0/mycontainer\n",
			Location{InJob: true, JobID: "12", Step: "3", Task: "0", UID: -1, Version: 2}},
		{"v2 SLUID", "0::/system.slice/slurmstepd.scope/s0W5FQ2XKD8Y3M/step_0/user/task_0\n",
			Location{InJob: true, SLUID: "0W5FQ2XKD8Y3M", Step: "0", Task: "0", UID: -1, Version: 2}},
		{"v2 het step", "0::/system.slice/slurmstepd.scope/job_9/step_0+1/user/task_0\n",
			Location{InJob: true, JobID: "9", Step: "0+1", Task: "0", UID: -1, Version: 2}},
		{"v1 every controller", "12:freezer:/slurm/uid_1002/job_5000/step_batch\n11:memory:/slurm/uid_1002/job_5000/step_batch/task_0\n10:devices:/slurm/uid_1002/job_5000/step_batch/task_0\n0::/\n",
			Location{InJob: true, JobID: "5000", Step: "batch", Task: "0", UID: 1002, Version: 1, Hierarchy: "memory"}},
		{"v1 one controller only", "5:devices:/slurm_node-c/uid_1002/job_5001/step_0/task_3\n4:memory:/\n0::/\n",
			Location{InJob: true, JobID: "5001", Step: "0", Task: "3", Node: "node-c", UID: 1002, Version: 1, Hierarchy: "devices"}},
		{"v1 named hierarchy", "1:name=systemd:/\n3:cpu,cpuacct:/slurm/uid_0/job_1/step_extern/task_0\n",
			Location{InJob: true, JobID: "1", Step: "extern", Task: "0", UID: 0, Version: 1, Hierarchy: "cpu,cpuacct"}},
		{"no job", hybridV1 + "0::/user.slice/user-1001.slice/session-3.scope\n", Location{}},
		{"kernel thread", "0::/\n", Location{}},
		{"slurmd's own cgroup", "0::/system.slice/slurmstepd.scope/system\n", Location{}},
		{"slurmd itself, multiple slurmd", "0::/system.slice/node-b_slurmstepd.scope/slurmd\n", Location{}},
		{"a directory that is merely called slurm", "0::/slurm/job_1/step_0\n5:memory:/slurm/job_1\n", Location{}},
		{"empty", "", Location{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.content))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got.Path, got.Slurm = "", ""
			if got != tc.want {
				t.Errorf("Parse =\n %+v, want\n %+v", got, tc.want)
			}
		})
	}
}

// Slurm's directories sit where slurmd makes them; the same names anywhere
// else are a look-alike a user built (a systemd user manager delegates a
// writable subtree) and put no process in a job.
func TestLookalikesOutsideSlurmsTreeAreRefused(t *testing.T) {
	for name, content := range map[string]string{
		"user manager, v2":         "0::/user.slice/user-1002.slice/user@1002.service/app.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
		"multiple slurmd name, v2": "0::/user.slice/user-1002.slice/user@1002.service/app.slice/node-a_slurmstepd.scope/job_4242/step_0/slurm\n",
		"a SLUID, v2":              "0::/user.slice/user-1002.slice/user@1002.service/slurmstepd.scope/s0W5FQ2XKD8Y3M/step_0/user/task_0\n",
		"nested in a prefix, v2":   "0::/node-a/system.slice/slurmstepd.scope/job_12/step_3/user/task_0\n",
		"below another scope, v2":  "0::/system.slice/other.scope/slurmstepd.scope/job_12/step_3/user/task_0\n",
		"v1 nested":                "3:cpuset:/docker/x/slurm/uid_0/job_1/step_extern/task_0\n0::/\n",
		"v1 in a user's tree":      "4:memory:/user/1002.user/slurm/uid_1001/job_4242/step_0/task_0\n0::/\n",
	} {
		t.Run(name, func(t *testing.T) {
			loc, err := Parse([]byte(content))
			var ref *Refused
			if !errors.As(err, &ref) || ref.Reason != ReasonOutside {
				t.Fatalf("Parse = %+v, %v; want a Refused with reason %s", loc, err, ReasonOutside)
			}
			if loc.InJob {
				t.Fatalf("a look-alike was placed in a job: %+v", loc)
			}
		})
	}
	// A look-alike does not hide the job Slurm really put the process in.
	loc, err := Parse([]byte("4:memory:/slurm/uid_1001/job_7/step_0/task_0\n0::/user.slice/user-1001.slice/user@1001.service/slurmstepd.scope/job_4242/step_0/user/task_0\n"))
	if err != nil || loc.JobID != "7" {
		t.Fatalf("Parse = %+v, %v; want job 7", loc, err)
	}
}

// cgroup.conf's CgroupSlice, or a slurmd in a container, moves the tree:
// the layout says where.
func TestLayoutNamesTheParent(t *testing.T) {
	l := Layout{V2Parents: []string{"/node-a/system.slice", "/hpc.slice"}, V1Parents: []string{"/docker/x"}}
	for content, want := range map[string]Location{
		"0::/node-a/system.slice/slurmstepd.scope/job_12/step_3/user/task_0\n": {InJob: true, JobID: "12", Step: "3", Task: "0", UID: -1, Version: 2,
			Slurm: "/node-a/system.slice/slurmstepd.scope/job_12/step_3/user"},
		"0::/hpc.slice/n1_slurmstepd.scope/job_5/step_batch/slurm\n": {InJob: true, JobID: "5", Step: "batch", Stepd: true, Node: "n1", UID: -1, Version: 2,
			Slurm: "/hpc.slice/n1_slurmstepd.scope/job_5/step_batch/slurm"},
		"3:cpuset:/docker/x/slurm/uid_0/job_1/step_extern/task_0\n": {InJob: true, JobID: "1", Step: "extern", Task: "0", UID: 0, Version: 1,
			Hierarchy: "cpuset", Slurm: "/docker/x/slurm/uid_0/job_1"},
	} {
		got, err := l.Parse([]byte(content))
		if err != nil {
			t.Fatalf("%q: %v", content, err)
		}
		got.Path = ""
		if got != want {
			t.Errorf("%q:\n got %+v\nwant %+v", content, got, want)
		}
	}
	if loc, err := l.Parse([]byte("0::/system.slice/slurmstepd.scope/job_12/step_3/user/task_0\n")); loc.InJob || err == nil {
		t.Errorf("the default place is not this layout's, got %+v, %v", loc, err)
	}
}

func TestSlurmPartOfThePath(t *testing.T) {
	for content, want := range map[string]string{
		"0::/system.slice/slurmstepd.scope/job_1/step_0/user/task_0/x": "/system.slice/slurmstepd.scope/job_1/step_0/user",
		"0::/system.slice/slurmstepd.scope/job_1/step_0/slurm":         "/system.slice/slurmstepd.scope/job_1/step_0/slurm",
		"0::/system.slice/slurmstepd.scope/job_1":                      "/system.slice/slurmstepd.scope/job_1",
		"4:memory:/slurm_n1/uid_5/job_1/step_0/task_0":                 "/slurm_n1/uid_5/job_1",
		"4:memory:/slurm/uid_5/job_1":                                  "/slurm/uid_5/job_1",
	} {
		loc, err := Parse([]byte(content))
		if err != nil || loc.Slurm != want {
			t.Errorf("%q: Slurm = %q (%v), want %q", content, loc.Slurm, err, want)
		}
	}
}

func TestParseRejectsMalformedJobPaths(t *testing.T) {
	bad := map[string]string{
		"job_":              "0::/system.slice/slurmstepd.scope/job_/step_0/user/task_0",
		"job_12ab":          "0::/system.slice/slurmstepd.scope/job_12ab/step_0/user/task_0",
		"job id overflow":   "0::/system.slice/slurmstepd.scope/job_99999999999/step_0",
		"negative":          "0::/system.slice/slurmstepd.scope/job_-1/step_0",
		"leading zero":      "0::/system.slice/slurmstepd.scope/job_0042/step_0",
		"bad step":          "0::/system.slice/slurmstepd.scope/job_1/step_x y/user/task_0",
		"bad task":          "0::/system.slice/slurmstepd.scope/job_1/step_0/user/task_1a",
		"junk in scope":     "0::/system.slice/slurmstepd.scope/$(reboot)",
		"bad SLUID":         "0::/system.slice/slurmstepd.scope/s!!/step_0",
		"v1 bad uid":        "4:memory:/slurm/uid_bob/job_1/step_0",
		"v1 job_12ab":       "4:memory:/slurm/uid_1/job_12ab/step_0",
		"conflicting jobs":  "4:memory:/slurm/uid_1/job_1/step_0\n5:freezer:/slurm/uid_1/job_2/step_0",
		"garbage line only": "\x00\xff\xfe garbage",
	}
	for name, content := range bad {
		t.Run(name, func(t *testing.T) {
			loc, err := Parse([]byte(content))
			if err == nil {
				t.Fatalf("Parse accepted %q as %+v", content, loc)
			}
			if loc.InJob {
				t.Fatalf("a malformed path was placed in a job: %+v", loc)
			}
			if !utf8.ValidString(err.Error()) && !strings.Contains(content, "\xff") {
				t.Errorf("error is not valid UTF-8: %q", err)
			}
		})
	}
}

// A garbage line must not hide a good one: v1 hosts print many lines.
func TestGarbageLineBesideAJob(t *testing.T) {
	loc, err := Parse([]byte("garbage\n0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n"))
	if err != nil || !loc.InJob || loc.JobID != "5" {
		t.Fatalf("got %+v, %v", loc, err)
	}
}

func TestJobKeySeparatesNodesAndSLUIDs(t *testing.T) {
	a := Location{JobID: "1", Node: "node-a"}
	b := Location{JobID: "1", Node: "node-b"}
	s := Location{SLUID: "1"}
	if a.JobKey() == b.JobKey() || a.JobKey() == s.JobKey() || (Location{JobID: "1"}).JobKey() == s.JobKey() {
		t.Fatalf("job keys collide: %q %q %q", a.JobKey(), b.JobKey(), s.JobKey())
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1\n",
		"0::/system.slice/node-b_slurmstepd.scope/job_4300/step_batch/slurm\n",
		"0::/system.slice/slurmstepd.scope/s0W5FQ2XKD8Y3M/step_0/user/task_0\n",
		"12:freezer:/slurm/uid_1002/job_5000/step_batch/task_0\n0::/\n",
		"5:devices:/slurm_node-c/uid_1002/job_5001/step_extern/task_special\n",
		"0::/system.slice/slurmstepd.scope/job_/step_0\n",
		"0::/\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		loc, err := Parse(b)
		if err != nil {
			if loc.InJob {
				t.Fatalf("error with a job: %+v %v", loc, err)
			}
			return
		}
		if !loc.InJob {
			if loc != (Location{}) {
				t.Fatalf("not in a job but not zero: %+v", loc)
			}
			return
		}
		if (loc.JobID == "") == (loc.SLUID == "") {
			t.Fatalf("exactly one of JobID and SLUID must be set: %+v", loc)
		}
		if loc.JobID != "" && !allDigits(loc.JobID) {
			t.Fatalf("non-numeric job id %q", loc.JobID)
		}
		if loc.Step != "" && !validStep(loc.Step) {
			t.Fatalf("invalid step %q", loc.Step)
		}
		if loc.Node != "" && !validNodeName(loc.Node) {
			t.Fatalf("invalid node %q", loc.Node)
		}
		for _, s := range []string{loc.JobID, loc.SLUID, loc.Step, loc.Task, loc.Node} {
			if !utf8.ValidString(s) || strings.ContainsAny(s, "\n\"{}=/") {
				t.Fatalf("unsafe field %q in %+v", s, loc)
			}
		}
		again, err := Parse(b)
		if err != nil || again != loc {
			t.Fatalf("not deterministic")
		}
	})
}

func BenchmarkParse(b *testing.B) {
	in := []byte("12:pids:/\n11:freezer:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1\n")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Parse(in); err != nil {
			b.Fatal(err)
		}
	}
}
