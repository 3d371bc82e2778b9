package slurm

import "strconv"

// A process's place in its job, as its own environment says: slurmstepd
// sets SLURM_PROCID (the task's rank in its step) and SLURM_NODEID (the
// node's index in the job) in every task. A launcher that starts several
// ranks under one Slurm task (torchrun, mpirun, a PMI server) gives each
// child its own rank, while SLURM_PROCID is the task's and the same for
// all of them: the launcher's variable wins. These are the job's claims
// about its own processes; they label samples and decide nothing else.
const (
	EnvProcID = "SLURM_PROCID"
	EnvNodeID = "SLURM_NODEID"
)

// EnvLauncherRanks are the launchers' rank variables, the first set
// deciding: torchrun's, Open MPI's, MPICH's (PMI) and PMIx's.
var EnvLauncherRanks = []string{"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}

// TaskEnvKeys are the variables a process's environment is read for to
// place it in its job (Task).
func TaskEnvKeys() []string {
	return append(append([]string(nil), EnvLauncherRanks...), EnvProcID, EnvNodeID)
}

// MaxTaskNumber bounds a rank, a node index and a local task id: far
// above any job's size, and short as a label value.
const MaxTaskNumber = 1<<24 - 1

// Task returns the global rank and the node index an environment gives
// its process, each "" unless it is a decimal integer up to
// MaxTaskNumber. The first launcher variable set decides the rank, even
// when its value is refused: SLURM_PROCID would be the launcher's task's,
// another process's rank.
func Task(env map[string]string) (rank, node string) {
	rank = env[EnvProcID]
	for _, k := range EnvLauncherRanks {
		if v := env[k]; v != "" {
			rank = v
			break
		}
	}
	return TaskNumber(rank), TaskNumber(env[EnvNodeID])
}

// TaskNumber returns s in its canonical form if it is a decimal integer
// from 0 to MaxTaskNumber (digits only: no sign, no space), else "". A
// value longer than any such number with a few leading zeros is refused
// unparsed.
func TaskNumber(s string) string {
	if s == "" || len(s) > 16 {
		return ""
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > MaxTaskNumber {
		return ""
	}
	if s[0] == '0' && len(s) > 1 {
		return strconv.FormatUint(n, 10) // 007 and 7 are one rank
	}
	return s
}
