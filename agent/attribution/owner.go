package attribution

// A job's owner comes from what its user cannot forge: the v1 cgroup path
// where it names the uid, otherwise the real uids of the job's processes,
// by vote.

// ownerVotes counts the real uids of a job's members. slurmstepd and the
// extern step's placeholder run as root in every job, so they never vote;
// an adopted ssh session in the extern step votes only when no task does.
type ownerVotes struct{ task, extern map[int]int }

func newOwnerVotes() ownerVotes { return ownerVotes{task: map[int]int{}, extern: map[int]int{}} }

func (v ownerVotes) add(m *procEntry) {
	if m.loc.Stepd || m.uid < 0 {
		return // slurmstepd runs as root with slurmd's environment
	}
	if m.loc.Step == "extern" || m.loc.Task == "special" {
		v.extern[m.uid]++
	} else {
		v.task[m.uid]++
	}
}

// owner is the job's uid: pathUID when the v1 path names it (>= 0);
// otherwise the tasks' uid by majority, then the extern step's; -1 when
// nothing says.
func (v ownerVotes) owner(pathUID int) int {
	uid := pathUID
	if uid < 0 {
		uid = ownerByVote(v.task, true)
	}
	if uid < 0 {
		uid = ownerByVote(v.extern, false)
	}
	return uid
}

// ownerByVote picks the job owner from the real uids of its processes. A
// non-root uid wins over root: in a user's job, root processes are Slurm's
// own helpers, while the user cannot gain a root real uid. Root owns the job
// only when every task runs as root (rootOK), which is a job root submitted.
// Ties go to the lower uid, so the answer is stable.
func ownerByVote(votes map[int]int, rootOK bool) int {
	best := -1
	for u, n := range votes {
		if u == 0 {
			continue
		}
		if best < 0 || n > votes[best] || n == votes[best] && u < best {
			best = u
		}
	}
	if best < 0 && rootOK && votes[0] > 0 {
		best = 0
	}
	return best
}
