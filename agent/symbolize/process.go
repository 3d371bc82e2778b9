package symbolize

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// maxBadAddrs bounds the per-process set of addresses known to lie outside
// every mapping even after a refresh; it stops a garbage address from
// re-reading maps on every sample.
const maxBadAddrs = 1024

// process is the cached view of one process, valid for one (pid, start time).
type process struct {
	pid       int
	startTime uint64 // 0 when unknown
	nspid     int    // pid inside the process's own pid namespace
	maps      []mapping
	mapsErr   bool
	badAddrs  map[uint64]struct{}
	perf      *perfMap
}

func (s *Symbolizer) procPath(pid int, elem ...string) string {
	return filepath.Join(append([]string{s.opts.ProcRoot, strconv.Itoa(pid)}, elem...)...)
}

// loadProcess reads a process's maps, start time and namespace pid.
func (s *Symbolizer) loadProcess(pid int) *process {
	s.stats.ProcessLoads++
	p := &process{pid: pid, nspid: pid}
	p.startTime, _ = readStartTime(s.procPath(pid, "stat"))
	if ns, ok := readNSpid(s.procPath(pid, "status")); ok {
		p.nspid = ns
	}
	s.readMaps(p)
	return p
}

func (s *Symbolizer) readMaps(p *process) {
	f, err := os.Open(s.procPath(p.pid, "maps"))
	if err != nil {
		// The process exited: a table read while it lived is still right
		// for its samples, so keep it.
		if len(p.maps) == 0 {
			p.maps, p.mapsErr = nil, true
		}
		return
	}
	defer f.Close()
	p.maps, _ = parseMaps(f)
	p.mapsErr = false
	p.badAddrs = nil
}

// readStartTime returns field 22 of /proc/<pid>/stat. The command name
// (field 2) may contain spaces and parentheses, so fields are counted from
// the last ')'.
func readStartTime(path string) (uint64, bool) {
	b, err := readBounded(path, 4096)
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	return v, err == nil
}

// readNSpid returns the innermost pid from the NSpid line of status, which
// names the perf map file inside a container.
func readNSpid(path string) (int, bool) {
	b, err := readBounded(path, 64<<10)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "NSpid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.Atoi(f[len(f)-1])
		return v, err == nil && v > 0
	}
	return 0, false
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// noteBadAddr records an address that missed after a refresh.
func (p *process) noteBadAddr(addr uint64) {
	if p.badAddrs == nil || len(p.badAddrs) >= maxBadAddrs {
		p.badAddrs = make(map[uint64]struct{})
	}
	p.badAddrs[addr] = struct{}{}
}

func (p *process) isBadAddr(addr uint64) bool {
	_, ok := p.badAddrs[addr]
	return ok
}

// perfMap returns the process's JIT perf map, reading new lines when the file
// has grown. It is looked up inside the process's root because a
// containerised JIT writes to its own /tmp under its namespace pid.
func (s *Symbolizer) perfMapFor(p *process) *perfMap {
	if p.perf == nil {
		p.perf = &perfMap{path: s.procPath(p.pid, "root", "tmp", "perf-"+strconv.Itoa(p.nspid)+".map")}
	}
	return p.perf
}
