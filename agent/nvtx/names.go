package nvtx

import (
	"fmt"
	"sync"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/internal/printable"
)

// The ABI's caps (gpuinject/slurmscope_nvtx.h, version 1).
const (
	domainMax  = 64   // SLURMSCOPE_NVTX_DOMAIN_NAME_MAX
	messageMax = 256  // SLURMSCOPE_NVTX_MESSAGE_MAX
	namesMax   = 4096 // SLURMSCOPE_NVTX_NAMES_MAX
	textMax    = domainMax + 1 + messageMax
	idOther    = 1 // SLURMSCOPE_NVTX_ID_OTHER
)

// Module is the module of range frames in a profile; Prefix starts their
// names, so that a user sees they are ranges, not functions.
const (
	Module = "[nvtx]"
	Prefix = "[nvtx] "
	// OtherFrame is the range the library gives every name past its
	// table (SLURMSCOPE_NVTX_ID_OTHER).
	OtherFrame = Prefix + "(other NVTX ranges)"
	// DeeperFrame sits on the leaf side of the ranges kept where the
	// thread had more open than a sample keeps (the outermost 16).
	DeeperFrame = Prefix + "(deeper ranges not shown)"
)

// Tag is the check word of the root frames that are NVTX ranges
// (NVTX_ROOT_TAG, nvtx.h), and ConstName stack.h's constant that turns
// their capture on.
const (
	Tag       = 0x5854564e
	ConstName = "stack_nvtx"
)

// RangeID is the ABI's range id of text (domain, 0x00, message): FNV-1a
// 64, with 0 and 1 (reserved) mapped to 2.
func RangeID(text []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, c := range text {
		h ^= uint64(c)
		h *= 0x100000001b3
	}
	if h < 2 {
		h = 2
	}
	return h
}

// ParseName validates an announced name and returns the frame name it
// shows as: "[nvtx] message", or "[nvtx] domain: message". The process
// chooses every byte and the id, so the text must be what the library
// could have sent (lengths within the caps, the domain ended by its 0x00)
// and the id its hash; a name announced otherwise is refused, and no
// process can give an id a name its text does not hash to. Both parts are
// made printable (narrow messages are not guaranteed UTF-8).
func ParseName(id uint64, text []byte, domainLen uint32) (string, error) {
	switch {
	case id < 2:
		return "", fmt.Errorf("reserved id %d", id)
	case len(text) == 0 || len(text) > textMax:
		return "", fmt.Errorf("text of %d bytes", len(text))
	case domainLen > domainMax || int(domainLen) >= len(text) || text[domainLen] != 0:
		return "", fmt.Errorf("domain length %d of %d bytes", domainLen, len(text))
	case len(text)-int(domainLen)-1 > messageMax:
		return "", fmt.Errorf("message of %d bytes", len(text)-int(domainLen)-1)
	case RangeID(text) != id:
		return "", fmt.Errorf("id %016x is not the text's hash", id)
	}
	domain, msg := printable.Name(text[:domainLen]), printable.Name(text[domainLen+1:])
	if msg == "" {
		msg = "(unnamed)"
	}
	if domain == "" {
		return Prefix + msg, nil
	}
	return Prefix + domain + ": " + msg, nil
}

// unknownFrame names a range whose name the process has not announced
// (yet: names are re-announced every second, or it was refused).
func unknownFrame(id uint64) string { return fmt.Sprintf("%s(range %016x)", Prefix, id) }

// NamesOptions bound what the processes' names take. Zero values select
// the defaults.
type NamesOptions struct {
	// MaxPerProcess bounds each process's names (default 4096, the
	// library's table); MaxBytes all processes' name bytes (default 32
	// MiB).
	MaxPerProcess int
	MaxBytes      int64
	// Budget, when set, holds each process's names, charged to
	// Owner(process) (its job) in steps of 16 KiB: a job announcing names
	// fills only its own share.
	Budget *budget.Budget
	Owner  func(procfs.ID) string
}

// chargeStep is the step in which a process's names are charged, and
// nameOverhead what one name costs besides its bytes (map entry, string
// header).
const (
	chargeStep   = 16 << 10
	nameOverhead = 64
)

// Names holds the range names each process announced, and names the root
// frames of its samples: it is the interp.Annotator of NVTX ranges. It is
// safe for concurrent use.
type Names struct {
	o     NamesOptions
	mu    sync.Mutex
	procs map[procfs.ID]*procNames
	bytes int64
	st    Stats
}

type procNames struct {
	names  map[uint64]string
	bytes  int64
	charge *budget.Entry
}

// Stats count what became of announced names and of the ranges of
// samples.
type Stats struct {
	Names, Duplicates                         uint64 // announcements kept, and seen again
	Invalid, PerProcessFull, AllFull, Refused uint64 // refused: malformed or a wrong id; a process's cap; all bytes; the job's budget
	Frames, Unnamed, Truncated                uint64 // range frames named, of them without a name, stacks cut
}

var _ interp.Annotator = (*Names)(nil)

// NewNames makes an empty table.
func NewNames(o NamesOptions) *Names {
	if o.MaxPerProcess <= 0 {
		o.MaxPerProcess = namesMax
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 32 << 20
	}
	return &Names{o: o, procs: map[procfs.ID]*procNames{}}
}

func (n *Names) Name() string  { return "nvtx" }
func (n *Names) Const() string { return ConstName }
func (n *Names) Tag() uint64   { return Tag }

// Add records a name announced by process p (whose identity the kernel
// gave). It returns an error saying why a name was refused.
func (n *Names) Add(p procfs.ID, id uint64, text []byte, domainLen uint32) error {
	if id == idOther { // the library's overflow range, which the agent names itself (OtherFrame)
		n.mu.Lock()
		n.st.Duplicates++
		n.mu.Unlock()
		return nil
	}
	name, err := ParseName(id, text, domainLen)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		n.st.Invalid++
		return err
	}
	pn := n.procs[p]
	if pn != nil {
		if old, ok := pn.names[id]; ok && old == name {
			n.st.Duplicates++
			return nil
		}
	}
	if pn != nil && len(pn.names) >= n.o.MaxPerProcess {
		n.st.PerProcessFull++
		return fmt.Errorf("process %d has %d names", p.PID, len(pn.names))
	}
	cost := int64(len(name)) + nameOverhead
	if n.bytes+cost > n.o.MaxBytes {
		n.st.AllFull++
		return fmt.Errorf("names of all processes hold %d bytes", n.bytes)
	}
	if pn == nil {
		pn = &procNames{names: map[uint64]string{}}
		if b := n.o.Budget; b != nil {
			owner := budget.Unknown
			if n.o.Owner != nil {
				owner = n.o.Owner(p)
			}
			if pn.charge, err = b.Charge(owner, budget.NVTXNames, chargeStep, nil); err != nil {
				n.st.Refused++
				return err
			}
		}
		n.procs[p] = pn
	}
	if pn.charge != nil && pn.bytes+cost > pn.charge.Size() {
		if err := pn.charge.Resize((pn.bytes + cost + chargeStep - 1) / chargeStep * chargeStep); err != nil {
			n.st.Refused++
			return err
		}
	}
	if old, ok := pn.names[id]; ok { // a hash collision: the later name stays
		pn.bytes -= int64(len(old)) + nameOverhead
		n.bytes -= int64(len(old)) + nameOverhead
	}
	pn.names[id] = name
	pn.bytes += cost
	n.bytes += cost
	n.st.Names++
	return nil
}

// Forget drops a process's names.
func (n *Names) Forget(p procfs.ID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if pn := n.procs[p]; pn != nil {
		n.bytes -= pn.bytes
		if pn.charge != nil {
			pn.charge.Release()
		}
		delete(n.procs, p)
	}
}

// Root names the range frames of one sample of p, captured outermost
// first, and returns them innermost first (interp.Stack.Root), under
// DeeperFrame where inner ones were cut.
func (n *Names) Root(p interp.Process, frames []bpf.InterpFrame, truncated bool) []symbolize.Frame {
	out := make([]symbolize.Frame, 0, len(frames)+1)
	if truncated {
		out = append(out, symbolize.Frame{Function: DeeperFrame, Module: Module})
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	pn := n.procs[p.ID()]
	for i := len(frames) - 1; i >= 0; i-- {
		id := frames[i].Addr
		name, ok := "", false
		if pn != nil {
			name, ok = pn.names[id]
		}
		switch {
		case ok:
		case id == idOther:
			name = OtherFrame
		default:
			name = unknownFrame(id)
			n.st.Unnamed++
		}
		out = append(out, symbolize.Frame{Function: name, Module: Module})
	}
	n.st.Frames += uint64(len(frames))
	if truncated {
		n.st.Truncated++
	}
	return out
}

// Stats returns the counters so far.
func (n *Names) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st
}
