package symbolize

import (
	"strconv"

	"github.com/slurmscope/slurmscope/agent/procfs"
)

// maxBadAddrs bounds the per-process set of addresses known to lie outside
// every mapping even after a refresh; it stops a garbage address from
// re-reading maps on every sample.
const maxBadAddrs = 1024

// process is the cached view of one process, valid for one procfs.ID.
type process struct {
	id       procfs.ID // Start 0 when unknown
	status   procfs.Status
	maps     []mapping
	mapsErr  bool
	badAddrs map[uint64]struct{}
	perf     *perfMap
}

// loadProcess reads a process's maps, start time, uid and namespace pid.
func (s *Symbolizer) loadProcess(pid int) *process {
	s.stats.ProcessLoads++
	p := &process{id: procfs.ID{PID: pid}, status: procfs.Status{UID: -1, NSpid: pid}}
	if id, err := s.opts.Proc.ID(pid); err == nil {
		p.id = id
	}
	if st, err := s.opts.Proc.Status(pid); err == nil {
		p.status = st
	}
	s.readMaps(p)
	return p
}

func (s *Symbolizer) readMaps(p *process) {
	maps, err := s.opts.Proc.Maps(p.id.PID, func(m *procfs.Mapping) bool { return m.Exec() })
	if err != nil && maps == nil {
		// The process exited: a table read while it lived is still right
		// for its samples, so keep it.
		if len(p.maps) == 0 {
			p.maps, p.mapsErr = nil, true
		}
		return
	}
	// A mapping that did not change keeps the file it was resolved to: a
	// re-read (a dlopen, a reload of the unwinder's tables) while the
	// process exits could no longer open it, and would lose its symbols
	// for the samples still to come.
	known := make(map[procfs.Mapping]*fileRef, len(p.maps))
	for _, m := range p.maps {
		if m.file != nil && m.file.err == "" {
			known[m.Mapping] = m.file
		}
	}
	p.maps = make([]mapping, len(maps))
	for i := range maps {
		p.maps[i].Mapping = maps[i]
		p.maps[i].file = known[maps[i]]
	}
	p.mapsErr = false
	p.badAddrs = nil
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

// perfMapFor returns the process's JIT perf map, reading new lines when the
// file has grown. It is looked up inside the process's root because a
// containerised JIT writes to its own /tmp under its namespace pid.
func (s *Symbolizer) perfMapFor(p *process) *perfMap {
	if p.perf == nil {
		p.perf = &perfMap{proc: s.opts.Proc, req: procfs.JobFile{
			PID: p.id.PID, Path: "/tmp/perf-" + strconv.Itoa(p.status.NSpid) + ".map",
			UID: p.status.UID, MaxSize: maxPerfMapBytes,
		}}
	}
	return p.perf
}
