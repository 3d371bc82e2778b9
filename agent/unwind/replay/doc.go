// Package replay tests the unwinder against recorded snapshots of real
// processes, with no timing: the registers and stack of a thread stopped
// at a fixed point, its mappings, trimmed copies of its mapped code files,
// and the frames gdb unwound from there with the files' full DWARF.
//
// # Snapshots
//
// testdata/<name>/snapshot.json holds the registers, mappings, files'
// identities and gdb's frames (pc, sp, rbp, names); images.bin.gz holds
// the stack bytes, each file's trimmed image (Trim: the ELF headers, the
// call frame entries and symbols of the recorded frames, the rest zero, at
// the original's size) and, for CPython, the process memory its frames
// resolve from. The workloads: internal/testenv/workloads' unwindc
// (split, qsort through glibc, a signal handler, the vDSO) and unwindcxx
// (a throw inside libgcc and libstdc++, recursion deeper than the
// unwinder's frame limit), built -O2 -fomit-frame-pointer; CPython
// 3.9-3.13 (pyenv's) and Debian's static, stripped python3.11 running
// recorder/pyprog.py, stopped by its own SIGSTOP.
//
// Regenerate them all, from the repository root (needs gdb, gcc, g++,
// pyenv's CPython 3.9-3.13 and Debian's python3.11):
//
//	go run ./agent/unwind/replay/record
//
// Stack canaries, pids and inode numbers change from one recording to
// the next; the frames do not, unless the compiler, the C library or the
// interpreters did.
//
// # Tests
//
// Without root: each file image is the one recorded (hash, size, build
// id); for every frame, the row agent/unwind/cfi builds from the trimmed
// file at its pc gives the next frame's sp and pc (and rbp where the row
// restores it) on the recorded stack; the trimmed files name the frames
// as the originals did; and agent/python's Tracker resolves the raw
// Python frames to what the script saw, which interp.Splice puts in the
// eval-loop frames' places. As root with SLURMSCOPE_INTEGRATION=1:
// unwind.h itself, run by BPF_PROG_TEST_RUN (agent/unwind/unwindtest's
// replay probe) over the stack mapped at its recorded address in the test
// process, through the tables agent/unwind's Loader loaded for the
// snapshot's mappings, gives gdb's pcs; and TestLive records every
// workload afresh on the machine and replays it through all of the above.
package replay
