package cgroup_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/cgroup/cgrouptest"
)

func parse(t *testing.T, content string) cgroup.Location {
	t.Helper()
	loc, err := cgroup.Parse([]byte(content))
	if err != nil || !loc.InJob {
		t.Fatalf("Parse(%q) = %+v, %v", content, loc, err)
	}
	return loc
}

func wantRefused(t *testing.T, err error, reason string) {
	t.Helper()
	var ref *cgroup.Refused
	if !errors.As(err, &ref) || ref.Reason != reason {
		t.Fatalf("Verify = %v, want a Refused with reason %s", err, reason)
	}
}

func TestTreeAcceptsSlurmsDirectories(t *testing.T) {
	tree := &cgroup.Tree{Root: t.TempDir(), Owner: os.Getuid()}
	v2 := parse(t, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")
	v1 := parse(t, "11:freezer:/slurm/uid_1002/job_5000/step_batch/task_0\n0::/\n")
	cgrouptest.Add(t, tree, true, "", v2.Path)
	cgrouptest.Add(t, tree, false, "freezer", v1.Path)
	for _, loc := range []cgroup.Location{v2, v1} {
		if err := tree.Verify(loc); err != nil {
			t.Errorf("Verify(%s): %v", loc.Path, err)
		}
	}
	// A pure v2 host: the hierarchy is the root itself.
	pure := &cgroup.Tree{Root: t.TempDir(), Owner: os.Getuid()}
	if err := os.WriteFile(filepath.Join(pure.Root, "cgroup.controllers"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pure.Root, v2.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pure.Verify(v2); err != nil {
		t.Errorf("pure v2: %v", err)
	}
}

func TestTreeRefusesMissingAndLinkedDirectories(t *testing.T) {
	tree := &cgroup.Tree{Root: t.TempDir(), Owner: os.Getuid()}
	loc := parse(t, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")
	wantRefused(t, tree.Verify(loc), cgroup.ReasonUnverified)

	// The job directory a symlink to a tree the user made: not followed.
	mnt := filepath.Join(tree.Root, "unified")
	if err := os.MkdirAll(filepath.Join(mnt, "system.slice/slurmstepd.scope"), 0o755); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(tree.Root, "elsewhere")
	if err := os.MkdirAll(filepath.Join(elsewhere, "step_0/user/task_0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(mnt, "system.slice/slurmstepd.scope/job_4242")); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, tree.Verify(loc), cgroup.ReasonUnverified)

	bad := loc
	bad.Version, bad.Hierarchy = 1, "../../etc"
	wantRefused(t, tree.Verify(bad), cgroup.ReasonUnverified)
}

// A directory of the Slurm part that root does not own is not Slurm's:
// the job's user made it. As root the test gives one to nobody; as
// another user, every directory it makes is its own, not root's.
func TestTreeRefusesDirectoriesRootDoesNotOwn(t *testing.T) {
	loc := parse(t, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n")
	v1 := parse(t, "11:freezer:/slurm/uid_1002/job_5000/step_batch/task_0\n0::/\n")
	tree := &cgroup.Tree{Root: t.TempDir(), Owner: 0}
	dir := cgrouptest.Add(t, tree, true, "", loc.Path)
	v1dir := cgrouptest.Add(t, tree, false, "freezer", v1.Path)
	if os.Getuid() == 0 {
		if err := tree.Verify(loc); err != nil {
			t.Fatalf("all root's: %v", err)
		}
		// Slurm gives task (v2) and step (v1) directories to the job's
		// user: those may be anyone's.
		if err := os.Chown(dir, 1002, 1002); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Dir(v1dir), 1002, 1002); err != nil {
			t.Fatal(err)
		}
		if err := tree.Verify(loc); err != nil {
			t.Errorf("a task directory owned by the job's user: %v", err)
		}
		if err := tree.Verify(v1); err != nil {
			t.Errorf("a v1 step directory owned by the job's user: %v", err)
		}
		// The job directory is Slurm's.
		if err := os.Chown(filepath.Join(tree.Root, "unified/system.slice/slurmstepd.scope/job_4242"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(tree.Root, "freezer/slurm/uid_1002/job_5000"), 1002, 1002); err != nil {
			t.Fatal(err)
		}
	}
	wantRefused(t, tree.Verify(loc), cgroup.ReasonOwner)
	wantRefused(t, tree.Verify(v1), cgroup.ReasonOwner)
}

func TestTreeRefusesALocationWithoutSlurmPart(t *testing.T) {
	tree := &cgroup.Tree{Root: t.TempDir(), Owner: os.Getuid()}
	wantRefused(t, tree.Verify(cgroup.Location{InJob: true, Version: 2, Path: "/"}), cgroup.ReasonUnverified)
}
