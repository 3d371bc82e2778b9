// Package python finds the CPython interpreters in a process and turns what
// the BPF walk in python.bpf.h captures (each frame's code object and
// instruction offset) into Python functions, files and lines.
//
// # What runs where
//
//   - User space, once per process: find the interpreter from the ELF file
//     that holds _PyRuntime (the executable, or a libpython it maps), its
//     version (Py_Version, the file's SONAME or name, or its version
//     string), and the layout of that version (one table, layout.go; on 3.13
//     the interpreter's own _Py_DebugOffsets, checked against the table).
//     The result, a ProcInfo, goes into the BPF map py_procs keyed by tgid.
//   - BPF, at each sample: find the sampled thread's own PyThreadState (a
//     cached walk of the interpreter's thread list, matched by the thread's
//     id, see python.bpf.h) and copy its chain of frames: code object
//     address, raw instruction offset, and whether the frame was the first
//     one of a C call of the eval loop.
//   - User space, after the fact: read each code object's name, file and
//     line table from the process's memory (bounded, cached per process and
//     code object, Resolver) and splice the Python frames into the native
//     stack (Splice).
//
// Everything read from a process is hostile: a process may fake its
// interpreter structures. Every read is bounded, and what it fakes can only
// change its own profile.
package python
