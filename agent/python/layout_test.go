package python

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What the BPF walk gets for each version: one test per version, literal.
func TestProcInfoPerVersion(t *testing.T) {
	want := map[int]ProcInfo{
		9: {RuntimeInterpHead: 32, CodeCheck: 104, InterpThreadsHead: 8, TstateNext: 8, TstateFrame: 24, CframeCurrentFrame: NoOffset,
			TstateId: 176, FrameReadOff: 24, FrameReadLen: 84, FrameBack: 0, FrameCode: 8, FrameLasti: 80},
		10: {RuntimeInterpHead: 32, CodeCheck: 104, InterpThreadsHead: 8, TstateNext: 8, TstateFrame: 24, CframeCurrentFrame: NoOffset,
			TstateId: 176, FrameReadOff: 24, FrameReadLen: 76, FrameBack: 0, FrameCode: 8, FrameLasti: 72},
		11: {Flags: procNativeTID, CodeCheck: 112, RuntimeInterpHead: 40, InterpThreadsHead: 16, TstateNext: 8, TstateFrame: 56, CframeCurrentFrame: 8,
			TstateId: 160, FrameReadOff: 32, FrameReadLen: 38, FrameBack: 16, FrameCode: 0, FrameLasti: 24, FrameIsEntry: 36, FrameOwner: 37, LastiBase: ^uint64(0)},
		12: {Flags: procNativeTID, CodeCheck: 112, RuntimeInterpHead: 40, InterpThreadsHead: 72, TstateNext: 8, TstateFrame: 56, CframeCurrentFrame: 0,
			TstateId: 144, FrameReadOff: 0, FrameReadLen: 71, FrameBack: 8, FrameCode: 0, FrameLasti: 56, FrameOwner: 70, LastiBase: ^uint64(0)},
		13: {Flags: procNativeTID, CodeCheck: 112, RuntimeInterpHead: 632, InterpThreadsHead: 7344, TstateNext: 8, TstateFrame: 72, CframeCurrentFrame: NoOffset,
			TstateId: 160, FrameReadOff: 0, FrameReadLen: 71, FrameBack: 8, FrameCode: 0, FrameLasti: 56, FrameOwner: 70, LastiBase: ^uint64(0)},
	}
	for _, minor := range SupportedVersions() {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			for _, arch := range []Arch{AMD64, ARM64} {
				l, err := LayoutFor(3, minor, arch)
				if err != nil {
					t.Fatal(err)
				}
				got, err := NewProcInfo(l, arch, 0x1000)
				if arch == ARM64 && minor < 11 {
					// pthread_self is not the thread pointer on arm64, and
					// 3.9/3.10 record nothing else.
					if !errors.Is(err, ErrUnsupported) {
						t.Errorf("arm64: %v, want ErrUnsupported", err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", arch, err)
				}
				w := want[minor]
				w.Runtime = 0x1000
				if got != w {
					t.Errorf("%s:\n got %+v\nwant %+v", arch, got, w)
				}
			}
		})
	}
	if _, err := LayoutFor(3, 14, AMD64); !errors.Is(err, ErrUnsupported) {
		t.Errorf("3.14: %v, want ErrUnsupported", err)
	}
	if _, err := LayoutFor(3, 12, "riscv64"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("riscv64: %v, want ErrUnsupported", err)
	}
}

// offsetsC prints, as constants in an object file, every offset of the
// table, from a version's own headers (Py_BUILD_CORE exposes the internal
// structures).
const offsetsC = `
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_MINOR_VERSION >= 11
#include "internal/pycore_frame.h"
#else
#include "frameobject.h"
#endif
#define O(name, expr) const unsigned long OFF_##name = (expr);
O(RuntimeInterpretersHead, offsetof(_PyRuntimeState, interpreters.head))
O(InterpNext, offsetof(PyInterpreterState, next))
#if PY_MINOR_VERSION >= 11
O(InterpThreadsHead, offsetof(PyInterpreterState, threads.head))
O(TstateNativeThreadID, offsetof(PyThreadState, native_thread_id))
O(FrameBack, offsetof(_PyInterpreterFrame, previous))
O(FrameOwner, offsetof(_PyInterpreterFrame, owner))
O(CodeQualname, offsetof(PyCodeObject, co_qualname))
O(CodeAdaptive, offsetof(PyCodeObject, co_code_adaptive))
O(CodeLineTable, offsetof(PyCodeObject, co_linetable))
#else
O(InterpThreadsHead, offsetof(PyInterpreterState, tstate_head))
O(TstateFrame, offsetof(PyThreadState, frame))
O(FrameBack, offsetof(PyFrameObject, f_back))
O(FrameCode, offsetof(PyFrameObject, f_code))
O(FrameLasti, offsetof(PyFrameObject, f_lasti))
#endif
#if PY_MINOR_VERSION == 11 || PY_MINOR_VERSION == 12
O(TstateFrame, offsetof(PyThreadState, cframe))
O(CFrameCurrentFrame, offsetof(_PyCFrame, current_frame))
O(FrameCode, offsetof(_PyInterpreterFrame, f_code))
O(FrameLasti, offsetof(_PyInterpreterFrame, prev_instr))
#endif
#if PY_MINOR_VERSION == 11
O(FrameIsEntry, offsetof(_PyInterpreterFrame, is_entry))
#endif
#if PY_MINOR_VERSION >= 13
O(TstateFrame, offsetof(PyThreadState, current_frame))
O(FrameCode, offsetof(_PyInterpreterFrame, f_executable))
O(FrameLasti, offsetof(_PyInterpreterFrame, instr_ptr))
#endif
#if PY_MINOR_VERSION == 9
O(CodeLineTable, offsetof(PyCodeObject, co_lnotab))
#elif PY_MINOR_VERSION == 10
O(CodeLineTable, offsetof(PyCodeObject, co_linetable))
#endif
O(TstateNext, offsetof(PyThreadState, next))
O(TstateInterp, offsetof(PyThreadState, interp))
O(TstateThreadID, offsetof(PyThreadState, thread_id))
O(CodeFilename, offsetof(PyCodeObject, co_filename))
O(CodeName, offsetof(PyCodeObject, co_name))
O(CodeFirstLineNo, offsetof(PyCodeObject, co_firstlineno))
O(ObType, offsetof(PyObject, ob_type))
O(TypeName, offsetof(PyTypeObject, tp_name))
O(VarSize, offsetof(PyVarObject, ob_size))
O(BytesData, offsetof(PyBytesObject, ob_sval))
O(UnicodeLength, offsetof(PyASCIIObject, length))
O(UnicodeState, offsetof(PyASCIIObject, state))
O(ASCIISize, sizeof(PyASCIIObject))
O(CompactSize, sizeof(PyCompactUnicodeObject))
`

// TestLayoutMatchesHeaders compiles offsetsC against the headers of every
// pyenv CPython here, for x86-64 and (with Debian's libc6-dev-arm64-cross)
// arm64, and holds the table to what the compiler says. A version or a
// target that is not installed is skipped by name.
func TestLayoutMatchesHeaders(t *testing.T) {
	clang, err := exec.LookPath("clang-14")
	if err != nil {
		t.Skip("clang-14 not installed")
	}
	src := filepath.Join(t.TempDir(), "offsets.c")
	if err := os.WriteFile(src, []byte(offsetsC), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := map[Arch][]string{AMD64: {"-target", "x86_64-linux-gnu"}}
	if _, err := os.Stat("/usr/aarch64-linux-gnu/include/stdio.h"); err == nil {
		targets[ARM64] = []string{"-target", "aarch64-linux-gnu", "-isystem", "/usr/aarch64-linux-gnu/include"}
	}
	for _, minor := range SupportedVersions() {
		for _, arch := range []Arch{AMD64, ARM64} {
			t.Run(fmt.Sprintf("3.%d/%s", minor, arch), func(t *testing.T) {
				inc, _ := filepath.Glob(filepath.Join(pyenvRoot(), fmt.Sprintf("3.%d.*", minor), "include", fmt.Sprintf("python3.%d", minor)))
				if len(inc) == 0 {
					t.Skipf("pyenv CPython 3.%d not installed", minor)
				}
				flags, ok := targets[arch]
				if !ok {
					t.Skipf("no %s C library headers (libc6-dev-arm64-cross)", arch)
				}
				obj := filepath.Join(t.TempDir(), "offsets.o")
				args := append(append([]string{}, flags...), "-I", inc[0], "-I", filepath.Join(inc[0], "internal"), "-c", src, "-o", obj)
				if out, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
					t.Fatalf("clang: %v\n%s", err, out)
				}
				got := readOffsets(t, obj)
				l, _ := LayoutFor(3, minor, arch)
				checked := 0
				for name, v := range got {
					field := reflectField(&l, name)
					if field == nil {
						t.Errorf("no table field %s", name)
						continue
					}
					if uint64(*field) != v {
						t.Errorf("%s: table %d, headers %d", name, *field, v)
					}
					checked++
				}
				if checked < 20 {
					t.Errorf("only %d offsets checked", checked)
				}
			})
		}
	}
}

func readOffsets(t *testing.T, path string) map[string]uint64 {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range syms {
		if !strings.HasPrefix(s.Name, "OFF_") || int(s.Section) >= len(f.Sections) {
			continue
		}
		d, err := f.Sections[s.Section].Data()
		if err != nil || s.Value+8 > uint64(len(d)) {
			t.Fatalf("%s: %v", s.Name, err)
		}
		out[strings.TrimPrefix(s.Name, "OFF_")] = binary.LittleEndian.Uint64(d[s.Value:])
	}
	return out
}

// reflectField returns the uint16 field of l called name.
func reflectField(l *Layout, name string) *uint16 {
	fields := map[string]*uint16{
		"RuntimeInterpretersHead": &l.RuntimeInterpretersHead, "InterpNext": &l.InterpNext, "InterpThreadsHead": &l.InterpThreadsHead,
		"TstateNext": &l.TstateNext, "TstateInterp": &l.TstateInterp, "TstateFrame": &l.TstateFrame,
		"CFrameCurrentFrame": &l.CFrameCurrentFrame, "TstateThreadID": &l.TstateThreadID, "TstateNativeThreadID": &l.TstateNativeThreadID,
		"FrameBack": &l.FrameBack, "FrameCode": &l.FrameCode, "FrameLasti": &l.FrameLasti, "FrameIsEntry": &l.FrameIsEntry,
		"FrameOwner": &l.FrameOwner, "CodeFilename": &l.CodeFilename, "CodeName": &l.CodeName, "CodeQualname": &l.CodeQualname,
		"CodeLineTable": &l.CodeLineTable, "CodeFirstLineNo": &l.CodeFirstLineNo, "CodeAdaptive": &l.CodeAdaptive,
		"ObType": &l.ObType, "TypeName": &l.TypeName, "VarSize": &l.VarSize, "BytesData": &l.BytesData,
		"UnicodeLength": &l.UnicodeLength, "UnicodeState": &l.UnicodeState, "ASCIISize": &l.ASCIISize, "CompactSize": &l.CompactSize,
	}
	return fields[name]
}

// Every layout of the table passes the checks that a process's own
// (3.13's debug offsets) must pass.
func TestTableLayoutsPassTheChecks(t *testing.T) {
	for minor, l := range layouts {
		if err := l.check(); err != nil {
			t.Errorf("3.%d: %v", minor, err)
		}
	}
}
