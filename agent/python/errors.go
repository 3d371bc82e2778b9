package python

import "errors"

var (
	// ErrNotPython: the file holds no CPython runtime (_PyRuntime).
	ErrNotPython = errors.New("not a CPython interpreter")
	// ErrUnknownVersion: the file holds _PyRuntime but nothing says which
	// version it is.
	ErrUnknownVersion = errors.New("CPython version unknown")
	// ErrUnsupported: a version, build or architecture this package has no
	// layout for. Such a process gets native stacks only.
	ErrUnsupported = errors.New("unsupported CPython")
	// ErrBadInterpreter: what the file or the process holds contradicts the
	// layout (a damaged or faked interpreter).
	ErrBadInterpreter = errors.New("inconsistent CPython structures")
	// ErrNotInitialized: the interpreter has not made its first thread state
	// yet; look again shortly.
	ErrNotInitialized = errors.New("CPython runtime not initialised yet")
)
