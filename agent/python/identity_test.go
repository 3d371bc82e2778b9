package python

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/internal/testenv"
)

// markerEnv makes the test binary a process that holds a marker at a fixed
// address and waits: the processes the identity tests read.
const markerEnv = "SLURMSCOPE_PYTHON_TEST_MARKER"

// markerAddr is where each marker process maps its page.
const markerAddr = 0x5a5a0000000

func TestMain(m *testing.M) {
	if v := os.Getenv(markerEnv); v != "" {
		holdMarker(v)
	}
	os.Exit(m.Run())
}

func holdMarker(v string) {
	// A raw mmap: the address is a number, not a Go pointer.
	addr, _, errno := unix.Syscall6(unix.SYS_MMAP, markerAddr, uintptr(pageSize), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE, ^uintptr(0), 0)
	if errno != 0 || addr != markerAddr {
		fmt.Println("mmap:", errno)
		os.Exit(2)
	}
	if err := ProcessMemory(os.Getpid()).write(markerAddr, v); err != nil {
		fmt.Println("write:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	select {}
}

// marker starts a marker process holding v; it is killed and reaped at
// cleanup unless the test does it first.
func marker(t *testing.T, v string) (*exec.Cmd, interp.Process) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), markerEnv+"="+v)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("marker process: %q, %v", line, err)
	}
	st, err := procfs.New("/proc").Stat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, interp.Process{PID: uint32(cmd.Process.Pid), StartNs: procfs.BoottimeFromStart(st.StartTime)} // #nosec G115 -- a pid
}

func reap(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Kill()
	cmd.Wait()
}

// readMarker reads the marker through the tracker's checks, as one batch.
func readMarker(mem Memory) (string, error) {
	c := &checkedMemory{mem: mem, ranges: &readable{spans: []span{{markerAddr, markerAddr + pageSize}}}}
	defer c.done()
	b := make([]byte, 16)
	if err := c.ReadAt(b, markerAddr); err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\x00"), nil
}

// A process's memory is read while it is that process: a start time that
// is not the pid's, or a process reaped while a batch of reads is open,
// fails the read rather than reading another.
func TestMemoryOfIsOneProcess(t *testing.T) {
	cmd, p := marker(t, "process A")
	if got, err := readMarker(MemoryOf(p)); err != nil || got != "process A" {
		t.Fatalf("reading the live process: %q, %v", got, err)
	}
	other := p
	other.StartNs += 1e9 // a second later: another process with this pid
	if _, err := readMarker(MemoryOf(other)); !errors.Is(err, errReplaced) {
		t.Errorf("reading under another start time: %v, want errReplaced", err)
	}

	// A batch opened while the process lived, and its process reaped.
	pg, err := MemoryOf(p).(pagedMemory).pager()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.close()
	if err := pg.(sameProcess).same(); err != nil {
		t.Fatalf("the live process: %v", err)
	}
	reap(t, cmd)
	if err := pg.(sameProcess).same(); !errors.Is(err, errReplaced) {
		t.Errorf("the reaped process: %v, want errReplaced", err)
	}
}

// The attack the identity defends against, for real: a process exits and
// another takes its pid (pid_max wraps in seconds in a job that forks
// fast; here ns_last_pid sets it, as root). A read by pid alone reads the
// newcomer; a read of the process sampled fails.
func TestIntegrationPidReusedBetweenSampleAndRead(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	for try := 0; try < 50; try++ {
		a, pa := marker(t, "process A")
		// An unprivileged job cannot get a pid back within the tick its
		// holder started in (pids are handed out in turn: wrapping pid_max
		// takes far longer than a tick, 10 ms), and start times are kept
		// to the tick. ns_last_pid, which needs root, could: wait one out.
		time.Sleep(20 * time.Millisecond)
		reap(t, a)
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(int(pa.PID)-1)), 0); err != nil {
			t.Fatalf("setting the next pid: %v", err)
		}
		b, pb := marker(t, "process B")
		if pb.PID != pa.PID {
			reap(t, b) // another process took the pid first; again
			continue
		}
		if got, err := readMarker(ProcessMemory(pa.PID)); err != nil || got != "process B" {
			t.Fatalf("by pid alone: %q, %v; want the newcomer's marker (the hazard)", got, err)
		}
		if got, err := readMarker(MemoryOf(pa)); !errors.Is(err, errReplaced) {
			t.Errorf("the sampled process's memory after its pid went to another: %q, %v; want errReplaced", got, err)
		}
		if got, err := readMarker(MemoryOf(pb)); err != nil || got != "process B" {
			t.Errorf("the newcomer as itself: %q, %v", got, err)
		}
		return
	}
	t.Fatal("no marker process got the pid of the one before it in 50 tries")
}

// write puts v at addr of the process's own memory (process_vm_writev):
// how a marker process fills its page without a Go pointer to it.
func (pid ProcessMemory) write(addr uint64, v string) error {
	b := []byte(v)
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	_, err := unix.ProcessVMWritev(int(pid), local, remote, 0)
	return err
}
