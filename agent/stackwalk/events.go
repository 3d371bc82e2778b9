package stackwalk

import (
	"errors"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Flags of stack_event (stack.h).
const (
	eventNoTables = bpf.EventNoTables
	eventNoInterp = bpf.EventNoInterp
	eventFork     = bpf.EventFork
	eventUnknown  = bpf.EventUnknownCode
)

// decodeEvent reads one stack_event record; false for a short one.
func decodeEvent(raw []byte) (procEvent, bool) {
	var ev bpf.StackEvent
	if len(raw) < int(unsafe.Sizeof(ev)) {
		return procEvent{}, false
	}
	ev = *(*bpf.StackEvent)(unsafe.Pointer(&raw[0]))
	out := procEvent{
		id:      procfs.ID{PID: int(ev.Tgid), Start: procfs.StartFromBoottime(ev.StartBoottime)},
		startNs: ev.StartBoottime, mm: ev.Mm, flags: ev.Flags, kind: ev.Kind,
	}
	if ev.Flags&eventFork != 0 {
		out.parent = procfs.ID{PID: int(ev.ParentTgid), Start: procfs.StartFromBoottime(ev.ParentStartBoottime)}
		out.parentStartNs = ev.ParentStartBoottime
	}
	return out, true
}

// readEvents handles stack_events until the Walker closes.
func (w *Walker) readEvents() {
	defer w.wg.Done()
	w.raise()
	var rec ringbuf.Record
	for {
		if err := w.events.ReadInto(&rec); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue
		}
		if ev, ok := decodeEvent(rec.RawSample); ok {
			w.handle(ev, time.Now())
		}
	}
}

// handle acts on one stack_events event: a forked child set up from its
// parent, or a process a probe sampled without state for it.
func (w *Walker) handle(ev procEvent, now time.Time) {
	if ev.flags&eventFork != 0 {
		in := w.interps.of(ev.kind)
		w.life.forked(ev, in != nil && in.Fork(ev.process(), interpProcess(ev.parent, ev.parentStartNs, 0)))
		return
	}
	if ev.flags&eventUnknown != 0 {
		// A loaded process ran code mapped since its load: synced again
		// now, under the same backoff as the poll of unknown frames.
		for _, id := range w.life.unknown([]int{ev.id.PID}, now) {
			w.enqueue(id)
		}
		if ev.flags == eventUnknown {
			return
		}
	}
	sync, interpreters := w.life.announced(ev, now)
	if sync {
		w.enqueue(ev.id)
	}
	if interpreters && w.interps.announce(ev.process()) {
		w.wakeLoop()
	}
}
