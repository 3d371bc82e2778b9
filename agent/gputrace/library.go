package gputrace

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/slurmscope/slurmscope/agent/elfcheck"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// LibraryName is the base name of the injection library; versioned names
// (libslurmscope_inject.so.1) match too.
const LibraryName = "libslurmscope_inject.so"

// abiVersion is the marker ABI this agent speaks (SLURMSCOPE_INJECT_ABI_VERSION).
const abiVersion = 1

// maxLibraryBytes bounds the library file a job maps (the real one is tens
// of KiB): a job can map any file under the library's name.
const maxLibraryBytes = 64 << 20

// ErrNotInjected means the process does not have the injection library
// mapped (yet: CUDA loads it at initialisation, which may come late).
var ErrNotInjected = errors.New("injection library not mapped")

// FindMapping returns the first mapping of the injection library in process
// pid. It returns ErrNotInjected if it is not mapped and an error wrapping
// fs.ErrNotExist (procfs.ErrGone) if the process is gone.
func FindMapping(proc procfs.FS, pid int) (procfs.Mapping, error) {
	maps, err := proc.Maps(pid, isLibrary)
	if err != nil {
		return procfs.Mapping{}, err
	}
	if len(maps) == 0 {
		return procfs.Mapping{}, ErrNotInjected
	}
	return maps[0], nil
}

// isLibrary keeps mappings of a file named like the library.
func isLibrary(m *procfs.Mapping) bool {
	return m.FileBacked() && isLibraryName(filepath.Base(m.Path))
}

func isLibraryName(base string) bool {
	return base == LibraryName || strings.HasPrefix(base, LibraryName+".")
}

// elfReader is the GPU tracer as a reader of job files (agent/elfcheck):
// it reads the dynamic symbols, their names and versions (the real
// library's are a few KiB).
var (
	elfReader = elfcheck.NewReader("gpu_trace")
	elfLimits = elfcheck.Limits{Symbols: 16 << 20, Strings: 16 << 20, Versions: 16 << 20,
		Frames: elfcheck.Unread, Pclntab: elfcheck.Unread}
)

// readABIVersion reads the library's exported slurmscope_inject_abi_version
// from r, of real size size. The file is whatever a job mapped: its sizes
// are checked first, and the ELF parser's panics on malformed input are
// turned into errors.
func readABIVersion(r io.ReaderAt, size int64) (v uint32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed ELF: %v", r)
		}
	}()
	f, err := elfReader.Open(r, size, elfLimits)
	if err != nil {
		return 0, err
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return 0, err
	}
	for _, s := range syms {
		if s.Name != "slurmscope_inject_abi_version" || s.Size != 4 ||
			elf.ST_TYPE(s.Info) != elf.STT_OBJECT || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		// Written so that nothing wraps: a hostile symbol value or section
		// size near 2^64 would otherwise pass.
		if sec.Type == elf.SHT_NOBITS || sec.Size < 4 || sec.Size > math.MaxInt64 || s.Value < sec.Addr || s.Value-sec.Addr > sec.Size-4 {
			return 0, errors.New("slurmscope_inject_abi_version outside its section")
		}
		var b [4]byte
		at := int64(s.Value - sec.Addr) // #nosec G115 -- at most sec.Size, checked <= MaxInt64 above
		if _, err := sec.ReadAt(b[:], at); err != nil {
			return 0, err
		}
		return f.ByteOrder.Uint32(b[:]), nil
	}
	return 0, errors.New("no slurmscope_inject_abi_version symbol")
}
