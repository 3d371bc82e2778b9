package gputrace

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/slurmscope/slurmscope/agent/bpf"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/procfs"
)

// Wire sizes of the ring buffer events (markers.bpf.c). TestObjectLayout
// checks them against the generated types, so the decoder below cannot drift
// from the C structs unnoticed.
const (
	headerSize      = 16
	stackDepth      = 127
	recordsMax      = 64 // SLURMSCOPE_RECORDS_MAX
	recordSize      = 56 // sizeof(struct slurmscope_kernel_record)
	nameMax         = 512
	interpStackLen  = 16 + bpf.InterpStackFrames*24 // struct interp_stack
	launchEventLen  = headerSize + 8 + 8 + 4*4 + 8 + 8 + stackDepth*8 + interpStackLen
	launchStackOff  = headerSize + 8 + 8 + 4*4 + 8 + 8
	launchInterpOff = launchStackOff + stackDepth*8
	recordsEvLen    = headerSize + 8 + recordsMax*recordSize
	nameEventLen    = headerSize + 8 + 8 + nameMax
	stateEventLen   = headerSize + 8 + 4*4
)

// Trace states and reasons of slurmscope_trace_state (slurmscope_inject.h).
const (
	stateAside   = 0 // the library stepped aside: no kernel of the process is traced
	stateTracing = 1 // tracing again

	reasonOtherSubscriber = 1 // the process's own CUPTI client (a profiler) subscribed
	reasonReleased        = 2 // that client unsubscribed
)

// Launch flags (slurmscope_inject.h).
const (
	FlagGraph       = 0x1 // graph launch: name id 0, many records share its correlation id
	FlagCooperative = 0x2
	FlagDriverAPI   = 0x4
	FlagNested      = 0x8 // inside another launch API call on the same thread
)

// GPUInstanceNone is the gpu_instance_id of a device that is not a MIG
// instance (or when the library could not tell). DeviceUnknown is the device
// of a launch whose device CUPTI could not tell.
const (
	GPUInstanceNone = 0xffffffff
	DeviceUnknown   = 0xffffffff
)

var errShortEvent = errors.New("short event")

// header is what the kernel, not the traced process, says about an event.
type header struct {
	kind uint32
	proc procfs.ID // the thread-group leader's, converted from start_boottime
}

type launchEvent struct {
	header
	correlationID uint64
	nameID        uint64
	tid           uint32
	device        uint32
	flags         uint32
	stackErr      bool             // no user stack was taken
	stack         []uint64         // innermost first
	truncated     bool             // the stack was cut at stackDepth frames
	setup         uint32           // what of the capture was set up (bpf.Setup*)
	raw           *bpf.InterpStack // the thread's raw interpreter frames; nil: none
	// interp is raw named (the tracer does it as it reads the event,
	// while the process lives).
	interp interp.Stack
}

// kernelRecord is struct slurmscope_kernel_record as the process wrote it:
// every field is untrusted.
type kernelRecord struct {
	correlationID uint64
	startNs       uint64
	endNs         uint64
	nameID        uint64
	device        uint32
	context       uint32
	stream        uint32
	gpuInstance   uint32
	sampled       bool
}

// duration is end - start, or 0 for a record whose clock runs backwards or
// that was not timed (start = end = 0).
func (r kernelRecord) duration() uint64 {
	if r.endNs > r.startNs {
		return r.endNs - r.startNs
	}
	return 0
}

type nameEvent struct {
	header
	nameID  uint64
	len     uint32 // claimed
	name    []byte // the copied bytes; aliases the input
	partial bool   // claimed length exceeds what was copied
}

// stateEvent is a slurmscope_trace_state call. state and reason are the
// process's word, checked in decodeState; the time is the kernel's.
type stateEvent struct {
	header
	ktimeNs uint64 // CLOCK_MONOTONIC
	tid     uint32
	aside   bool
	reason  uint32
}

var le = binary.LittleEndian

func decodeHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, errShortEvent
	}
	return header{kind: le.Uint32(b), proc: procfs.ID{PID: int(le.Uint32(b[4:])), Start: procfs.StartFromBoottime(le.Uint64(b[8:]))}}, nil
}

func decodeLaunch(h header, b []byte) (launchEvent, error) {
	if len(b) < launchEventLen {
		return launchEvent{}, fmt.Errorf("launch event of %d bytes: %w", len(b), errShortEvent)
	}
	e := launchEvent{
		header:        h,
		correlationID: le.Uint64(b[16:]),
		nameID:        le.Uint64(b[24:]),
		tid:           le.Uint32(b[32:]),
		device:        le.Uint32(b[36:]),
		flags:         le.Uint32(b[40:]),
	}
	n := int32(le.Uint32(b[44:])) // #nosec G115 -- the BPF side's s32 (a negative errno), reinterpreted on purpose
	ret := le.Uint64(b[48:])
	end := le.Uint32(b[56:])
	e.setup = le.Uint32(b[60:])
	if in := decodeInterp(b[launchInterpOff:]); in.Len > 0 {
		e.raw = in
	}
	if n <= 0 {
		e.stackErr = true
		return e, nil
	}
	// The program filled n bytes (what lies beyond is stale); trust it no
	// further than the array.
	frames := min(int(n)/8, stackDepth)
	e.stack = make([]uint64, 0, frames+1)
	for i := range frames {
		pc := le.Uint64(b[launchStackOff+8*i:])
		if pc == 0 {
			break
		}
		e.stack = append(e.stack, pc)
	}
	e.truncated = len(e.stack) == stackDepth || end == unwindEndFrameLimit
	e.stack = withCaller(e.stack, ret)
	return e, nil
}

// unwindEndFrameLimit is UNWIND_END_FRAME_LIMIT (unwind.h).
const unwindEndFrameLimit = 1

// decodeInterp copies a struct interp_stack out of an event; its length is
// clamped to the array, its frames are checked by their interpreter.
func decodeInterp(b []byte) *bpf.InterpStack {
	in := &bpf.InterpStack{Len: le.Uint32(b), Status: le.Uint32(b[4:]), Flags: le.Uint32(b[8:]), Kind: le.Uint32(b[12:])}
	in.Len = min(in.Len, uint32(len(in.Frames)))
	for i := range int(in.Len) {
		f := b[16+24*i:]
		in.Frames[i] = bpf.InterpFrame{Addr: le.Uint64(f), Check: le.Uint64(f[8:]), Data: le.Uint64(f[16:])}
	}
	return in
}

// withCaller inserts the marker's return address as the second frame when
// the unwind skipped it (see return_address in markers.bpf.c): the first
// frame is the marker itself, the second should be its caller.
func withCaller(stack []uint64, ret uint64) []uint64 {
	if ret == 0 || len(stack) == 0 || (len(stack) > 1 && stack[1] == ret) {
		return stack
	}
	stack = append(stack, 0)
	copy(stack[2:], stack[1:])
	stack[1] = ret
	return stack
}

// decodeRecords appends the event's records to dst.
func decodeRecords(dst []kernelRecord, b []byte) ([]kernelRecord, error) {
	if len(b) < recordsEvLen {
		return dst, fmt.Errorf("records event of %d bytes: %w", len(b), errShortEvent)
	}
	n := le.Uint32(b[16:])
	if n == 0 || n > recordsMax {
		// The BPF side rejects these; seeing one means a bug, not a caller.
		return dst, fmt.Errorf("records event with n=%d", n)
	}
	for i := range int(n) {
		r := b[24+i*recordSize:]
		dst = append(dst, kernelRecord{
			correlationID: le.Uint64(r),
			startNs:       le.Uint64(r[8:]),
			endNs:         le.Uint64(r[16:]),
			nameID:        le.Uint64(r[24:]),
			device:        le.Uint32(r[32:]),
			context:       le.Uint32(r[36:]),
			stream:        le.Uint32(r[40:]),
			gpuInstance:   le.Uint32(r[44:]),
			sampled:       le.Uint32(r[48:]) != 0,
		})
	}
	return dst, nil
}

func decodeName(h header, b []byte) (nameEvent, error) {
	if len(b) < nameEventLen {
		return nameEvent{}, fmt.Errorf("name event of %d bytes: %w", len(b), errShortEvent)
	}
	e := nameEvent{header: h, nameID: le.Uint64(b[16:]), len: le.Uint32(b[24:])}
	copied := le.Uint32(b[28:])
	if copied > nameMax || copied > e.len {
		return nameEvent{}, fmt.Errorf("name event copied %d of %d bytes", copied, e.len)
	}
	e.name = b[32 : 32+copied]
	e.partial = e.len > copied
	return e, nil
}

func decodeState(h header, b []byte) (stateEvent, error) {
	if len(b) < stateEventLen {
		return stateEvent{}, fmt.Errorf("state event of %d bytes: %w", len(b), errShortEvent)
	}
	e := stateEvent{header: h, ktimeNs: le.Uint64(b[16:]), tid: le.Uint32(b[24:]), reason: le.Uint32(b[32:])}
	switch st := le.Uint32(b[28:]); st {
	case stateAside:
		e.aside = true
	case stateTracing:
	default:
		return stateEvent{}, fmt.Errorf("trace state %d", st)
	}
	return e, nil
}
