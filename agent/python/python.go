package python

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/symbolize"
)

// Module is the module of the Python frames in a profile.
const Module = "[python]"

// TruncatedFunction marks where a Python stack deeper than the capture
// keeps was cut (interp.TruncatedFunction of CPython).
const TruncatedFunction = "[python frames truncated]"

// CPython is the interpreter of the stack capture that walks CPython.
type CPython struct{}

var (
	_ interp.Interpreter = CPython{}
	_ interp.Instance    = (*Tracker)(nil)
)

func (CPython) Name() string      { return "python" }
func (CPython) Kind() interp.Kind { return interp.Kind(Kind) }
func (CPython) Module() string    { return Module }
func (CPython) Help() string {
	return "show the Python functions of CPython 3.9-3.13 processes in CPU and GPU stacks"
}

// EvalFrame reports whether a native frame is CPython's eval loop, which
// runs Python frames (on 3.9-3.13 _PyEval_EvalFrameDefault; GCC's split-off
// cold part, _PyEval_EvalFrameDefault.cold, is the same C frame).
func (CPython) EvalFrame(f symbolize.Frame) bool {
	return strings.HasPrefix(f.Function, "_PyEval_EvalFrameDefault") && !f.Inlined
}

// Open starts the tracker of the agent's CPython processes.
func (CPython) Open(env interp.Env) (interp.Instance, error) {
	arch := Arch(env.Arch)
	if arch == "" {
		arch = Arch(runtime.GOARCH)
	}
	if arch != AMD64 && arch != ARM64 {
		return nil, fmt.Errorf("%w: CPython frames on %s", ErrUnsupported, arch)
	}
	return NewTracker(TrackerOptions{Arch: arch, Maps: env.Maps, Open: env.Open, Procs: env.Procs, Ready: env.Ready,
		Owner: env.Owner, Log: env.Log}), nil
}
