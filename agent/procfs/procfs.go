// Package procfs reads the few /proc files slurmscope needs, from any root,
// and is the only part of the agent that does: the process identity (ID),
// stat, status, cgroup, environ, maps and map_files, the one way the agent
// opens a file a job controls (Open), and the one way it reads the files of
// a tree it was pointed at, such as jobs' cgroups (ReadFileBeneath).
//
// Everything under /proc is written by, or on behalf of, processes we do not
// trust, and a process can exit between two reads. Every read is therefore
// bounded, every parse tolerates garbage, and a vanished process is reported
// as ErrGone so callers can skip it quietly.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// ErrGone means the process exited (or its files vanished) while we read it.
var ErrGone = errors.New("process exited")

// Limits on what we read. A cgroup file is a handful of short lines; an
// environment may legitimately be megabytes (module systems, conda), so it is
// streamed rather than loaded.
const (
	maxCgroupBytes  = 64 << 10
	maxStatBytes    = 4 << 10
	maxStatusBytes  = 16 << 10
	MaxEnvironBytes = 32 << 20
)

// FS is a proc filesystem rooted at Root ("/proc" on a live node).
type FS struct {
	Root string
	// walkOnly makes Open resolve paths without openat2, as on kernels
	// before 5.6; tests cover both ways.
	walkOnly bool
}

// New returns an FS at root, defaulting to /proc.
func New(root string) FS {
	if root == "" {
		root = "/proc"
	}
	return FS{Root: root}
}

func (p FS) path(pid int, name string) string {
	return filepath.Join(p.Root, strconv.Itoa(pid), name)
}

// PIDs lists the numeric entries of the root: every process.
func (p FS) PIDs() ([]int, error) {
	d, err := os.Open(p.Root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 || strconv.Itoa(pid) != n {
			continue
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

func gone(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return err
}

// bufPool holds read buffers: a cold lookup reads three or four small
// files, and allocating for each would dominate its cost.
var bufPool = sync.Pool{New: func() any { b := make([]byte, maxCgroupBytes+1); return &b }}

// withFile reads at most limit bytes of /proc/<pid>/<name> into a pooled
// buffer and hands them to fn, which must copy what it keeps. It uses raw
// syscalls: os.File would register each descriptor with the poller.
func (p FS) withFile(pid int, name string, limit int, fn func(b []byte, cut bool) error) error {
	fd, err := syscall.Open(p.path(pid, name), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return gone(&fs.PathError{Op: "open", Path: p.path(pid, name), Err: err})
	}
	defer syscall.Close(fd)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := (*bp)[:limit+1]
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return gone(&fs.PathError{Op: "read", Path: p.path(pid, name), Err: err})
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n > limit {
		return fn(buf[:limit], true)
	}
	return fn(buf[:n], false)
}

// Cgroup calls fn with the raw contents of /proc/<pid>/cgroup.
func (p FS) Cgroup(pid int) ([]byte, error) {
	var out []byte
	err := p.withFile(pid, "cgroup", maxCgroupBytes, func(b []byte, cut bool) error {
		if cut {
			return fmt.Errorf("pid %d: cgroup file larger than %d bytes", pid, maxCgroupBytes)
		}
		out = append([]byte(nil), b...)
		return nil
	})
	return out, err
}

// Stat is the part of /proc/<pid>/stat we use.
type Stat struct {
	Comm      string // raw bytes of the command name; may be any bytes
	State     byte
	PPID      int
	Flags     uint64 // the thread-group leader's PF_* flags (field 9)
	StartTime uint64 // clock ticks since boot (field 22): with the pid, a process's ID
}

// PFExiting is the kernel's PF_EXITING: the task has begun to exit
// (include/linux/sched.h; ABI in practice, as ps reads it).
const PFExiting = 0x4

// Exiting reports whether the process's leader has begun to exit or is a
// zombie: its exit hooks have run or are running.
func (s Stat) Exiting() bool {
	return s.Flags&PFExiting != 0 || s.State == 'Z' || s.State == 'X'
}

// Stat reads /proc/<pid>/stat.
func (p FS) Stat(pid int) (Stat, error) {
	var s Stat
	err := p.withFile(pid, "stat", maxStatBytes, func(b []byte, _ bool) error {
		var err error
		if s, err = ParseStat(b); err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
		return nil
	})
	return s, err
}

// ID reads the identity of a live process: its pid and start time.
func (p FS) ID(pid int) (ID, error) {
	s, err := p.Stat(pid)
	return ID{PID: pid, Start: s.StartTime}, err
}

// ParseStat parses the contents of a stat file. The command name sits in
// parentheses and may itself contain ")" and spaces, so fields are counted
// from the last ")".
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Stat{}, errors.New("malformed stat: no (comm)")
	}
	rest := bytes.Fields(b[closing+1:])
	// rest[0] is field 3 (state); starttime is field 22.
	if len(rest) < 20 {
		return Stat{}, fmt.Errorf("malformed stat: %d fields after comm, want at least 20", len(rest))
	}
	st := Stat{Comm: string(b[open+1 : closing])}
	if len(rest[0]) != 1 {
		return Stat{}, errors.New("malformed stat: bad state")
	}
	st.State = rest[0][0]
	ppid, err := strconv.Atoi(string(rest[1]))
	if err != nil {
		return Stat{}, fmt.Errorf("malformed stat: ppid: %v", err)
	}
	st.PPID = ppid
	if st.Flags, err = strconv.ParseUint(string(rest[6]), 10, 64); err != nil {
		return Stat{}, fmt.Errorf("malformed stat: flags: %v", err)
	}
	st.StartTime, err = strconv.ParseUint(string(rest[19]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("malformed stat: starttime: %v", err)
	}
	return st, nil
}

// Status is the part of /proc/<pid>/status we use.
type Status struct {
	// UID is the real uid, not the effective one: a setuid helper run by a
	// job still belongs to the job's owner. -1 when the file has no Uid line.
	UID int
	// NSpid is the pid inside the process's own (innermost) pid namespace,
	// which names its files there (a JIT's /tmp/perf-<nspid>.map); the host
	// pid when the file has no NSpid line (kernels before 4.1).
	NSpid int
}

// Status reads /proc/<pid>/status.
func (p FS) Status(pid int) (Status, error) {
	var st Status
	err := p.withFile(pid, "status", maxStatusBytes, func(b []byte, _ bool) error {
		st = ParseStatus(b, pid)
		return nil
	})
	return st, err
}

// UID returns the real uid of a process from /proc/<pid>/status.
func (p FS) UID(pid int) (int, error) {
	uid := -1
	err := p.withFile(pid, "status", maxStatusBytes, func(b []byte, _ bool) error {
		var err error
		if uid, err = ParseStatusUID(b); err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
		return nil
	})
	return uid, err
}

// ParseStatus parses a status file of process pid. Malformed lines leave
// their field at its default.
func ParseStatus(b []byte, pid int) Status {
	st := Status{UID: -1, NSpid: pid}
	st.UID, _ = ParseStatusUID(b)
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		v, ok := bytes.CutPrefix(line, []byte("NSpid:"))
		if !ok {
			continue
		}
		if f := bytes.Fields(v); len(f) > 0 {
			if n, err := strconv.Atoi(string(f[len(f)-1])); err == nil && n > 0 {
				st.NSpid = n
			}
		}
		break
	}
	return st
}

// ParseStatusUID extracts the real uid from a status file.
func ParseStatusUID(b []byte) (int, error) {
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		v, ok := bytes.CutPrefix(line, []byte("Uid:"))
		if !ok {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 0 {
			break
		}
		uid, err := strconv.ParseUint(string(f[0]), 10, 32)
		if err != nil {
			return -1, fmt.Errorf("malformed Uid line: %v", err)
		}
		return int(uid), nil
	}
	return -1, errors.New("status has no Uid line")
}

// Environ streams /proc/<pid>/environ and returns the first value of each
// wanted key (the first, as getenv does). It stops as soon as every key is
// found, and reads at most MaxEnvironBytes, so a huge environment costs what
// it must and no more. Values are raw bytes; callers sanitise for output.
func (p FS) Environ(pid int, want ...string) (map[string]string, error) {
	if err := p.environResident(pid); err != nil {
		return nil, err
	}
	path := p.path(pid, "environ")
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, gone(&fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer syscall.Close(fd)
	return ScanEnviron(io.LimitReader(fdReader(fd), MaxEnvironBytes), want...)
}

type fdReader int

func (f fdReader) Read(b []byte) (int, error) {
	for {
		n, err := syscall.Read(int(f), b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// maxEnvValue bounds one wanted value; Slurm's own values are far shorter.
const maxEnvValue = 64 << 10

var envPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// ScanEnviron is Environ over any reader of NUL-separated KEY=VALUE entries.
func ScanEnviron(r io.Reader, want ...string) (map[string]string, error) {
	out := make(map[string]string, len(want))
	br := envPool.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() { br.Reset(nil); envPool.Put(br) }()
	for len(out) < len(want) {
		entry, err := br.ReadSlice(0)
		if errors.Is(err, bufio.ErrBufferFull) {
			// An entry longer than the buffer: keep it only if it is one
			// of ours, and only up to maxEnvValue.
			var long []byte
			ours := wanted(entry, want, out)
			if ours {
				long = append(long, entry...)
			}
			for errors.Is(err, bufio.ErrBufferFull) {
				entry, err = br.ReadSlice(0)
				if ours && len(long) < maxEnvValue+512 {
					long = append(long, entry...)
				}
			}
			entry = long
		}
		if len(entry) > 0 {
			kv := bytes.TrimSuffix(entry, []byte{0})
			if k, v, ok := bytes.Cut(kv, []byte{'='}); ok {
				for _, w := range want {
					if _, seen := out[w]; !seen && string(k) == w {
						if len(v) > maxEnvValue {
							v = v[:maxEnvValue]
						}
						out[w] = string(v)
					}
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return out, gone(err)
		}
	}
	return out, nil
}

func wanted(prefix []byte, want []string, have map[string]string) bool {
	for _, w := range want {
		if _, seen := have[w]; !seen && len(prefix) > len(w) && string(prefix[:len(w)]) == w && prefix[len(w)] == '=' {
			return true
		}
	}
	return false
}
