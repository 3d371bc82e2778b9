package slurm

import "testing"

func TestTaskNumber(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0", "7": "7", "007": "7", "16777215": "16777215", "16777216": "", "4294967296": "",
		"": "", "-1": "", "+1": "", " 1": "", "1 ": "", "1_000": "", "0x1": "", "1e3": "", "١": "",
		"00000000000000001": "", // longer than any rank with a few leading zeros
	} {
		if got := TaskNumber(in); got != want {
			t.Errorf("TaskNumber(%q) = %q, want %q", in, got, want)
		}
	}
}

// The first launcher variable set decides the rank, refused or not;
// SLURM_PROCID only where none is set.
func TestTask(t *testing.T) {
	for _, tc := range []struct {
		env        map[string]string
		rank, node string
	}{
		{map[string]string{EnvProcID: "3", EnvNodeID: "1"}, "3", "1"},
		{map[string]string{EnvProcID: "3", "RANK": "17"}, "17", ""},
		{map[string]string{EnvProcID: "3", "PMIX_RANK": "5", "OMPI_COMM_WORLD_RANK": "6"}, "6", ""},
		{map[string]string{EnvProcID: "3", "RANK": "x"}, "", ""},
		{map[string]string{EnvProcID: "3", "RANK": ""}, "3", ""},
		{nil, "", ""},
	} {
		if rank, node := Task(tc.env); rank != tc.rank || node != tc.node {
			t.Errorf("Task(%v) = %q, %q; want %q, %q", tc.env, rank, node, tc.rank, tc.node)
		}
	}
	keys := TaskEnvKeys()
	if len(keys) != len(EnvLauncherRanks)+2 || keys[len(keys)-2] != EnvProcID {
		t.Errorf("TaskEnvKeys = %q", keys)
	}
}
