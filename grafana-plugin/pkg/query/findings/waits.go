package findings

import (
	"regexp"
	"strings"
)

// Waits are where a job's threads blocked, from the blocked time of its
// off-CPU profile (schema.OffCPU), named as its user reads the program:
// the call it made when it left for the kernel (read, pthread_cond_wait)
// and the nearest caller of that call outside the kernel and the C
// library (load_batch).
//
// A flame graph carries names only, so frames are told apart by name. The
// kernel part of a stack starts at its entry point, a system call's or a
// page fault's, which a blocked thread's kernel stack holds on its root
// side: every frame past it is the kernel's, whatever it is called. C
// library frames are its blocking calls and the names C reserves to the
// implementation (two leading underscores: __libc_read,
// __futex_abstimed_wait_common).

// Wait is one place where a job's threads blocked.
type Wait struct {
	// Function is the call that blocked: the outermost of the C library
	// frames just above the kernel (pthread_cond_wait rather than the
	// futex wrapper it calls), else the innermost frame outside the
	// kernel.
	Function string `json:"function"`
	// Caller is Function's nearest caller outside the C library; "" when
	// the stack has none.
	Caller string `json:"caller,omitempty"`
	// Blocked is the time spent there, in nanoseconds.
	Blocked int64 `json:"blocked_ns"`
}

// WaitAt names the wait of one off-CPU stack, root first (Blocked is
// left 0). A stack with no frame outside the kernel is named by its leaf.
func WaitAt(stack []string) Wait {
	if len(stack) == 0 {
		return Wait{}
	}
	user := stack[:kernelEntry(stack)]
	if len(user) == 0 {
		return Wait{Function: stack[len(stack)-1]}
	}
	i := len(user) - 1
	if isLibc(user[i]) {
		for i > 0 && isLibc(user[i-1]) {
			i--
		}
	}
	w := Wait{Function: user[i]}
	for j := i - 1; j >= 0; j-- {
		if !isLibc(user[j]) {
			w.Caller = user[j]
			break
		}
	}
	return w
}

// kernelEntry is the index of the first frame, from the root, where the
// stack enters the kernel; len(stack) where it does not.
func kernelEntry(stack []string) int {
	for i, name := range stack {
		name = symbol(name)
		if kernelEntries[name] || hasAnyPrefix(name, syscallHandlers) {
			return i
		}
	}
	return len(stack)
}

// kernelEntries are the kernel's entry points from user space on x86-64
// and arm64: system calls (64- and 32-bit) and page faults.
var kernelEntries = set(
	"entry_SYSCALL_64", "entry_SYSCALL_64_after_hwframe", "do_syscall_64", "x64_sys_call",
	"entry_SYSENTER_compat", "entry_SYSENTER_compat_after_hwframe", "entry_SYSCALL_compat", "entry_INT80_compat",
	"do_fast_syscall_32", "do_int80_syscall_32", "asm_exc_page_fault", "exc_page_fault",
	"el0t_64_sync", "el0t_64_sync_handler", "el0_svc", "do_el0_svc", "el0_svc_common", "invoke_syscall", "el0_da", "do_mem_abort",
)

// syscallHandlers name system call handlers, the first kernel frames when
// a stack lost its entry frames.
var syscallHandlers = []string{"__x64_sys_", "__ia32_sys_", "__arm64_sys_", "__se_sys_", "__do_sys_", "ksys_"}

// libcCalls are the C library's calls that block, the ones a program
// makes; their own callees are mostly reserved names.
var libcCalls = set(
	"read", "write", "pread", "pread64", "pwrite", "pwrite64", "readv", "writev", "preadv", "preadv2", "pwritev", "pwritev2",
	"recv", "recvfrom", "recvmsg", "recvmmsg", "send", "sendto", "sendmsg", "sendmmsg", "accept", "accept4", "connect",
	"poll", "ppoll", "select", "pselect", "epoll_wait", "epoll_pwait", "epoll_pwait2",
	"nanosleep", "clock_nanosleep", "usleep", "sleep", "pause", "sigsuspend", "sigwait", "sigwaitinfo", "sigtimedwait",
	"wait", "waitpid", "wait4", "waitid", "open", "open64", "openat", "openat64", "close", "fsync", "fdatasync", "sync_file_range",
	"msync", "flock", "fcntl", "fcntl64", "ioctl", "syscall", "sched_yield",
	"pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "pthread_mutex_lock", "pthread_mutex_timedlock",
	"pthread_mutex_clocklock", "pthread_rwlock_rdlock", "pthread_rwlock_wrlock", "pthread_rwlock_timedrdlock",
	"pthread_rwlock_timedwrlock", "pthread_join", "pthread_timedjoin_np", "pthread_barrier_wait",
	"sem_wait", "sem_timedwait", "sem_clockwait", "mq_receive", "mq_timedreceive", "mq_send", "msgrcv", "msgsnd", "semop", "semtimedop",
	"do_futex_wait", "futex_wait", "futex_abstimed_wait", "futex_abstimed_wait_cancelable", "lll_lock_wait",
)

// isLibc says whether a frame is the C library's: one of its blocking
// calls, or a name reserved to the implementation (but not a Python
// method such as __next__, which ends as it starts).
func isLibc(name string) bool {
	name = symbol(name)
	return libcCalls[name] || strings.HasPrefix(name, "__") && !strings.HasSuffix(name, "__")
}

// cloneSuffix is what GCC appends to a function's local copies
// (do_futex_wait.constprop.0, pipe_read.cold).
var cloneSuffix = regexp.MustCompile(`(\.(constprop|isra|part|cold|lto_priv)(\.\d+)?)+$`)

// symbol is a frame's name without the suffix of a compiler's copy.
func symbol(name string) string { return cloneSuffix.ReplaceAllString(name, "") }

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
