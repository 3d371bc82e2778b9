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
// interpreter structures, edit its debug offsets, or put the pages the
// reader would fault in on its own FUSE mount. Every offset is checked in
// int against what it indexes (Layout.check); reads touch only anonymous
// memory and the interpreter's own data (readable.go); they run off the
// tracker's lock, one batch per job at a time, each within a deadline
// (deadline.go); each job pays for them out of its allowances of bytes and
// CPU time (meter.go); and a panic while reading one process marks that
// process unreadable. What a process fakes can only change its own
// profile.
package python
