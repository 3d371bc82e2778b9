package gputrace

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LibraryName is the base name of the injection library; versioned names
// (libslurmscope_inject.so.1) match too.
const LibraryName = "libslurmscope_inject.so"

// abiVersion is the marker ABI this agent speaks (SLURMSCOPE_INJECT_ABI_VERSION).
const abiVersion = 1

// ErrNotInjected means the process does not have the injection library
// mapped (yet: CUDA loads it at initialisation, which may come late).
var ErrNotInjected = errors.New("injection library not mapped")

// Mapping is the injection library as one process maps it.
type Mapping struct {
	// Path is the library's path in the process's mount namespace, as
	// /proc/<pid>/maps shows it (without a " (deleted)" suffix).
	Path string
	// MapFiles is <proc-root>/<pid>/map_files/<range>: the very file the
	// process mapped, even if it was deleted or replaced on disk since, or
	// lives in another mount namespace.
	MapFiles string
	// Root is <proc-root>/<pid>/root joined with Path: the fallback when
	// map_files is not readable.
	Root string
	// Deleted reports that the file was unlinked after it was mapped.
	Deleted bool
}

// maxMapsLine bounds one line of maps (a path is at most PATH_MAX).
const maxMapsLine = 8 << 10

// FindMapping looks for the injection library in <procRoot>/<pid>/maps. It
// returns ErrNotInjected if it is not mapped and an error wrapping
// fs.ErrNotExist if the process is gone.
func FindMapping(procRoot string, pid int) (Mapping, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		return Mapping{}, err
	}
	defer f.Close()
	m, ok, err := scanMaps(f)
	if err != nil {
		return Mapping{}, fmt.Errorf("%s/maps: %w", dir, err)
	}
	if !ok {
		return Mapping{}, ErrNotInjected
	}
	m.MapFiles = filepath.Join(dir, "map_files", m.MapFiles)
	m.Root = filepath.Join(dir, "root", m.Path)
	return m, nil
}

// scanMaps finds the first mapping of the library; MapFiles is set to the
// bare address range.
func scanMaps(r io.Reader) (Mapping, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxMapsLine)
	for sc.Scan() {
		line := sc.Bytes()
		// address perms offset dev inode path; the path is the rest of the
		// line after five fields and may contain spaces.
		rest := line
		var fields [5][]byte
		ok := true
		for i := range fields {
			rest = bytes.TrimLeft(rest, " ")
			j := bytes.IndexByte(rest, ' ')
			if j < 0 {
				ok = false
				break
			}
			fields[i], rest = rest[:j], rest[j:]
		}
		if !ok {
			continue
		}
		path := string(bytes.TrimLeft(rest, " "))
		deleted := false
		if p, cut := strings.CutSuffix(path, " (deleted)"); cut {
			path, deleted = p, true
		}
		if !strings.HasPrefix(path, "/") || !isLibraryName(filepath.Base(path)) {
			continue
		}
		if string(fields[4]) == "0" { // no inode: not a file
			continue
		}
		return Mapping{Path: path, MapFiles: string(fields[0]), Deleted: deleted}, true, nil
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return Mapping{}, false, err
	}
	return Mapping{}, false, nil
}

func isLibraryName(base string) bool {
	return base == LibraryName || strings.HasPrefix(base, LibraryName+".")
}

// readABIVersion reads the library's exported slurmscope_inject_abi_version.
// The file is whatever a job mapped, so the ELF parser's panics on malformed
// input are turned into errors.
func readABIVersion(path string) (v uint32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed ELF: %v", r)
		}
	}()
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
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
		if sec.Type == elf.SHT_NOBITS || s.Value < sec.Addr || s.Value+4 > sec.Addr+sec.Size {
			return 0, errors.New("slurmscope_inject_abi_version outside its section")
		}
		var b [4]byte
		if _, err := sec.ReadAt(b[:], int64(s.Value-sec.Addr)); err != nil {
			return 0, err
		}
		return f.ByteOrder.Uint32(b[:]), nil
	}
	return 0, errors.New("no slurmscope_inject_abi_version symbol")
}

// readStartTicks returns field 22 of <procRoot>/<pid>/stat.
func readStartTicks(procRoot string, pid int) (uint64, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(fields[19], 10, 64)
}
