package cgroup

import "testing"

func TestJobAndStepDirs(t *testing.T) {
	for _, tc := range []struct {
		content, job, step string
	}{
		{"0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1\n",
			"/system.slice/slurmstepd.scope/job_4242", "/system.slice/slurmstepd.scope/job_4242/step_0"},
		{"0::/system.slice/node-b_slurmstepd.scope/job_7/step_batch/slurm\n",
			"/system.slice/node-b_slurmstepd.scope/job_7", "/system.slice/node-b_slurmstepd.scope/job_7/step_batch"},
		// A prefix that looks like a job before Slurm's part does not count.
		{"0::/job_1/system.slice/slurmstepd.scope/s0W5FQ2XKD8Y3M/step_0/user/task_0/mycontainer\n",
			"/job_1/system.slice/slurmstepd.scope/s0W5FQ2XKD8Y3M", "/job_1/system.slice/slurmstepd.scope/s0W5FQ2XKD8Y3M/step_0"},
		{"0::/system.slice/slurmstepd.scope/job_7\n", "/system.slice/slurmstepd.scope/job_7", ""},
		{"4:memory:/slurm/uid_1002/job_5000/step_batch/task_0\n12:freezer:/slurm/uid_1002/job_5000/step_batch\n",
			"/slurm/uid_1002/job_5000", "/slurm/uid_1002/job_5000/step_batch"},
		{"3:cpuset:/docker/slurm/x/slurm_node-c/uid_0/job_1/step_extern/task_0\n",
			"/docker/slurm/x/slurm_node-c/uid_0/job_1", "/docker/slurm/x/slurm_node-c/uid_0/job_1/step_extern"},
		{"0::/user.slice/user-1001.slice/session-3.scope\n", "", ""},
	} {
		// The prefix and container cases need slurmd's trees there.
		l := Layout{V2Parents: []string{"/system.slice", "/job_1/system.slice"}, V1Parents: []string{"/", "/docker/slurm/x"}}
		loc, err := l.Parse([]byte(tc.content))
		if err != nil {
			t.Fatalf("%q: %v", tc.content, err)
		}
		if got := loc.JobDir(); got != tc.job {
			t.Errorf("%q: JobDir %q, want %q", tc.content, got, tc.job)
		}
		if got := loc.StepDir(); got != tc.step {
			t.Errorf("%q: StepDir %q, want %q", tc.content, got, tc.step)
		}
		// The directory is a job's cgroup by the parser's own rules.
		if tc.job != "" {
			jl, ok, err := l.ParsePath(tc.job, loc.Version)
			if !ok || err != nil || jl.JobKey() != loc.JobKey() || jl.Step != "" {
				t.Errorf("JobDir %q parses as %+v, %v, %v", tc.job, jl, ok, err)
			}
		}
	}
}
