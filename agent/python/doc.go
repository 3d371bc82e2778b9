// Package python is CPython as an interpreter of the stack capture
// (agent/interp: CPython is the Interpreter, Tracker its Instance). It
// finds the CPython interpreters in a process and turns what the BPF walk
// (../bpf/include/python.h) records of each frame, its code object and
// instruction offset, into Python functions, files and lines.
//
//   - User space, once per process: find the interpreter from the ELF file
//     that holds _PyRuntime (the executable, or a libpython it maps), its
//     version (Py_Version, the file's SONAME or name, or its version
//     string), and the layout of that version (one table, layout.go; on 3.13
//     the interpreter's own _Py_DebugOffsets, checked against the table).
//     The result, a ProcInfo (struct py_proc), goes into the capture's
//     process table.
//   - BPF, at each sample: find the sampled thread's own PyThreadState and
//     copy its chain of frames.
//   - User space, after the fact: read each code object's name, file and
//     line table from the process's memory (bounded, cached per process and
//     code object) and decode the frames (Decode); the daemon splices them
//     into the native stack (interp.Splice, by CPython.EvalFrame).
//
// Everything read from a process is hostile: a process may fake its
// interpreter structures. Every read is bounded, and what it fakes can only
// change its own profile.
package python
