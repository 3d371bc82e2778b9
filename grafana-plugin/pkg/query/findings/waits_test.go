package findings

import (
	"math"
	"strings"
	"testing"
)

// Off-CPU stacks as the agent takes them, root first: the program's
// frames, the C library's, then the kernel's from its entry point to the
// scheduler.
var (
	readPipe = []string{"main", "load_batch", "read",
		"entry_SYSCALL_64_after_hwframe", "do_syscall_64", "ksys_read", "vfs_read", "pipe_read", "schedule"}
	condWait = []string{"start_thread", "worker", "pthread_cond_wait", "__pthread_cond_wait_common", "__futex_abstimed_wait_common",
		"entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_futex", "do_futex", "futex_wait", "futex_wait_queue", "schedule"}
)

func TestWaitAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack []string
		want  Wait
	}{
		{"a read under the program's function", readPipe, Wait{Function: "read", Caller: "load_batch"}},
		{"the call the program made, not the C library's inner frames", condWait, Wait{Function: "pthread_cond_wait", Caller: "worker"}},
		{"arm64", []string{"main", "serve", "epoll_wait", "el0t_64_sync", "el0t_64_sync_handler", "el0_svc", "do_el0_svc",
			"invoke_syscall", "__arm64_sys_epoll_wait", "do_epoll_wait", "ep_poll", "schedule_hrtimeout_range", "schedule"},
			Wait{Function: "epoll_wait", Caller: "serve"}},
		{"a stack that lost its entry frames", []string{"main", "nap", "nanosleep", "__x64_sys_nanosleep", "hrtimer_nanosleep", "do_nanosleep", "schedule"},
			Wait{Function: "nanosleep", Caller: "nap"}},
		{"a page fault: the program's own frame blocked", []string{"main", "scan", "asm_exc_page_fault", "exc_page_fault", "handle_mm_fault", "folio_wait_bit", "io_schedule"},
			Wait{Function: "scan", Caller: "main"}},
		{"no kernel frames", []string{"main", "load_batch", "__libc_read"}, Wait{Function: "__libc_read", Caller: "load_batch"}},
		{"compiler copies of C library functions", []string{"main", "consume", "sem_wait", "do_futex_wait.constprop.0", "__futex_abstimed_wait_common64.isra.0", "entry_SYSCALL_64"},
			Wait{Function: "sem_wait", Caller: "consume"}},
		{"a Python method is the program's", []string{"<module>", "__next__", "sem_clockwait", "do_futex_wait", "entry_SYSCALL_64"},
			Wait{Function: "sem_clockwait", Caller: "__next__"}},
		{"a direct system call", []string{"runtime.mstart", "runtime.notesleep", "runtime.futex", "entry_SYSCALL_64_after_hwframe", "do_syscall_64"},
			Wait{Function: "runtime.futex", Caller: "runtime.notesleep"}},
		{"nothing calls it outside the C library", []string{"__libc_start_main", "poll", "entry_SYSCALL_64"}, Wait{Function: "__libc_start_main"}},
		{"only kernel frames", []string{"entry_SYSCALL_64", "do_syscall_64", "schedule"}, Wait{Function: "schedule"}},
	} {
		if got := WaitAt(tc.stack); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// underused is a job that used 2 of its 16 cores for an hour.
func underused() Job {
	j := quiet()
	j.Nodes[0].UsedCores = 2
	return j
}

// A job with idle cores names where its threads blocked instead, the
// largest waits first; without off-CPU data the finding is as it was.
func TestCPUUnderusedNamesWaits(t *testing.T) {
	plain, _ := find(Evaluate(underused(), Thresholds{}), CPUUnderused)
	if plain.Summary != "used 2 of 16 cores (12%)" || len(plain.Numbers) != 4 {
		t.Fatalf("without waits: %+v", plain)
	}
	j := underused()
	j.Blocked = 100e9
	j.Waits = []Wait{{"read", "load_batch", 73e9}, {"pthread_cond_wait", "worker", 20e9}, {"write", "", 5e9}, {"poll", "x", 2e9}}
	f, _ := find(Evaluate(j, Thresholds{}), CPUUnderused)
	want := "used 2 of 16 cores (12%); 73% of its threads' blocked time is in `read` under `load_batch`, 20% in `pthread_cond_wait` under `worker`"
	if f.Summary != want {
		t.Errorf("summary\n %q\nwant\n %q", f.Summary, want)
	}
	if f.Advice == plain.Advice || !strings.Contains(f.Advice, "where its threads block") {
		t.Errorf("advice %q", f.Advice)
	}
	if f.Value != plain.Value || f.Severity != plain.Severity {
		t.Errorf("the waits changed what alert rules compare: %+v", f)
	}
	if b, s := number(f, "blocked_time"), number(f, "top_wait_share"); b != 100e9 || math.Abs(s-0.73) > 1e-9 {
		t.Errorf("numbers %+v", f.Numbers)
	}
	// The largest wait is named whatever its share; a wait without a
	// caller is named alone; never more than three.
	j.Waits = []Wait{{"poll", "", 8e9}, {"read", "f", 7e9}}
	if f, _ := find(Evaluate(j, Thresholds{}), CPUUnderused); !strings.HasSuffix(f.Summary, "; 8% of its threads' blocked time is in `poll`") {
		t.Errorf("a small largest wait: %q", f.Summary)
	}
	j.Waits = []Wait{{"a", "", 25e9}, {"b", "", 25e9}, {"c", "", 25e9}, {"d", "", 25e9}}
	if f, _ := find(Evaluate(j, Thresholds{}), CPUUnderused); strings.Count(f.Summary, "%") != 4 {
		t.Errorf("four even waits: %q", f.Summary)
	}
	// Waits alone make no finding: a job that used its cores has none.
	busy := quiet()
	busy.Blocked, busy.Waits = 100e9, []Wait{{"read", "load_batch", 73e9}}
	if fs := Evaluate(busy, Thresholds{}); len(fs) != 0 {
		t.Errorf("findings for a busy job with waits: %+v", fs)
	}
	if NamesWaits(busy, Thresholds{}) || !NamesWaits(underused(), Thresholds{}) || NamesWaits(Job{ID: "1"}, Thresholds{}) {
		t.Error("NamesWaits disagrees with the cpuUnderused finding")
	}
	if !NamesWaits(busy, Thresholds{CPUEfficiencyBelow: 0.9}) {
		t.Error("NamesWaits ignores the threshold")
	}
}
