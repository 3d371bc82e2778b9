package symbolize

import (
	"errors"
	"time"

	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// fileRef is a mapping's link to its parsed file: the cache key, or the
// reason the file could not be used (until retryAt for a transient one;
// for good when retryAt is zero). The parsed file itself stays in the
// cache so that eviction really frees it.
type fileRef struct {
	id      fileIdentity
	err     ErrorKind
	retryAt time.Time
}

// openErrKind names why procfs refused to open a job's file.
func openErrKind(err error) ErrorKind {
	switch {
	case errors.Is(err, procfs.ErrNotMapped):
		return ErrFileIdentity
	case errors.Is(err, procfs.ErrNotRegular):
		return ErrNotRegular
	case errors.Is(err, procfs.ErrOwner):
		return ErrOwnerRefused
	case errors.Is(err, procfs.ErrLink):
		return ErrLink
	case errors.Is(err, procfs.ErrTooLarge), errors.Is(err, errPerfMapFull):
		return ErrTooLarge
	}
	return ErrOpenFile
}

func identityOf(f *procfs.File) fileIdentity { return identityOfInfo(f.Info) }

func identityOfInfo(i procfs.FileInfo) fileIdentity {
	return fileIdentity{dev: i.ID.Dev, ino: i.ID.Ino, size: i.Size, mtimeNsec: i.MtimeNsec}
}

// transient reports whether a failure may go away by itself.
func transient(k ErrorKind) bool {
	return k == ErrOverBudget || k == ErrWorkLimit || k == ErrStalledIO
}

// objFor returns the parsed file behind a mapping of p (whose lock the
// caller holds), opening and parsing it on first use, after eviction, and
// after a transient failure's wait. The file is opened and parsed through
// the guard: a file system that does not answer costs its job, not the
// others. A failure is counted here, once each time it is found (not per
// frame, and not again while the mapping remembers it).
func (s *Symbolizer) objFor(p *process, m *mapping) (*objFile, ErrorKind) {
	now := s.opts.Now()
	if r := m.file; r != nil {
		if r.err != "" && (r.retryAt.IsZero() || now.Before(r.retryAt)) {
			return nil, r.err
		}
		if r.err == "" {
			if obj := s.lookupFile(r.id); obj != nil {
				s.count(func(st *Stats) { st.FileCacheHits++ })
				obj.charge.Touch()
				return obj, obj.failed
			}
		}
	}
	var res loaded
	mp, uid, owner := m.Mapping, p.status.UID, p.owner
	if err := s.guard.Do(owner, func(progress func()) { res = s.loadFile(p.id.PID, &mp, uid, owner, progress) }); err != nil {
		res = loaded{kind: ErrStalledIO}
	}
	if res.kind != "" {
		s.countErr(res.kind)
	} else if res.obj.failed != "" {
		s.countErr(res.obj.failed)
	}
	switch {
	case res.kind == "":
		m.file = &fileRef{id: res.id}
		return res.obj, res.obj.failed
	case transient(res.kind):
		m.file = &fileRef{err: res.kind, retryAt: now.Add(retryTransient)}
	default:
		m.file = &fileRef{err: res.kind}
	}
	return nil, res.kind
}

// testHookParse, when set, runs before each parse (tests hold a parse
// with it, as a hung file system would).
var testHookParse func(pid int)

// loaded is what loadFile found.
type loaded struct {
	id   fileIdentity
	obj  *objFile  // set when kind is ""; obj.failed may say it is unusable
	kind ErrorKind // why there is no obj
}

// loadFile opens the file behind mapping m of process pid, by procfs's
// rules for a file a job controls (through map_files, or by path in the
// process's root when it is still the mapped file), and returns its parsed
// form: from the cache, from another caller's parse of the same file, or
// parsed now. It touches nothing but the cache: it runs under the guard.
func (s *Symbolizer) loadFile(pid int, m *procfs.Mapping, uid int, owner string, progress func()) loaded {
	// Identified first, by Open's checks without the open: a file parsed
	// for another process (every process's libc) is not opened again.
	if info, err := s.opts.Proc.StatMapping(pid, *m, uid, s.opts.MaxFileBytes); err == nil {
		id := identityOfInfo(info)
		if obj := s.lookupFile(id); obj != nil {
			s.count(func(st *Stats) { st.FileCacheHits++ })
			return loaded{id: id, obj: obj}
		}
	}
	f, err := s.opts.Proc.Open(procfs.JobFile{PID: pid, Mapping: m, UID: uid, MaxSize: s.opts.MaxFileBytes})
	if err != nil {
		return loaded{kind: openErrKind(err)}
	}
	defer f.Close()
	id := identityOf(f)
	e, mine := s.claim(id)
	if !mine {
		e.wait(progress) // another process's parse of the same file
		if obj := e.obj.Load(); obj != nil {
			s.count(func(st *Stats) { st.FileCacheHits++ })
			return loaded{id: id, obj: obj}
		}
		return loaded{id: id, kind: e.kind}
	}
	defer close(e.ready)
	s.count(func(st *Stats) { st.FileCacheMisses++ })
	if testHookParse != nil {
		testHookParse(pid)
	}
	// A file owned by root is the system's, the same for every job: it is
	// charged to the shared owner. Any other file is charged to the job
	// that made the agent read it. The reading is the job's either way.
	chargeTo := owner
	if f.Info.UID == 0 {
		chargeTo = budget.Shared
	}
	charge, err := s.budget.Charge(chargeTo, budget.Symbols, objBaseBytes, e.evict)
	if err != nil {
		e.kind = ErrOverBudget
		s.forgetFile(id, e)
		return loaded{id: id, kind: e.kind}
	}
	held := int64(objBaseBytes)
	grow := func(n int64) error {
		if err := charge.Resize(held + n); err != nil {
			return err
		}
		held += n
		return nil
	}
	wr := s.work.ReaderAt(owner, f.Reader())
	wr.OnRead = func() { e.reads.Add(1); progress() }
	obj, err := openObj(wr, id.size, grow)
	var kind ErrorKind
	switch {
	case err == nil:
	case wr.Denied():
		kind = ErrWorkLimit
	case errors.Is(err, budget.ErrOverBudget):
		kind = ErrOverBudget
	case errors.Is(err, errTooLarge):
		kind = ErrTooLarge
	case isPanic(err):
		kind = ErrPanic
	default:
		kind = ErrParseELF
	}
	if transient(kind) {
		charge.Release()
		e.kind = kind
		s.forgetFile(id, e)
		return loaded{id: id, kind: kind}
	}
	if kind != "" {
		// Cache the failure too, so a malformed file mapped by many
		// processes is parsed once.
		obj = &objFile{failed: kind, size: objBaseBytes}
	}
	obj.charge = charge
	if charge.Resize(obj.size) != nil || !e.publish(obj) {
		// Evicted while it was parsed: nothing is kept, try again later.
		charge.Release()
		e.kind = ErrOverBudget
		s.forgetFile(id, e)
		return loaded{id: id, kind: e.kind}
	}
	return loaded{id: id, obj: obj}
}
