package cpu

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// perfAttacher opens a cpu-clock sampling event per CPU and attaches the
// program to it.
type perfAttacher struct {
	progFD int
	hz     uint64
}

type perfEvent struct{ fd int }

func (a perfAttacher) Attach(cpu int) (event, error) {
	attr := unix.PerfEventAttr{
		// cpu-clock is a software event: it exists on every machine, VMs
		// included, and needs no PMU.
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: a.hz,
		// Freq: Sample is a frequency, not a period. Disabled: nothing fires
		// before the program is attached.
		Bits: unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	// pid -1 with a cpu: every task on that CPU.
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open cpu-clock: %w", err)
	}
	// The ioctl works on every kernel with perf_event programs (bpf links for
	// perf events need 5.15); closing the fd detaches the program.
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, a.progFD); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach program to perf event: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("enable perf event: %w", err)
	}
	return &perfEvent{fd: fd}, nil
}

func (e *perfEvent) Count() (uint64, error) {
	// read_format is 0, so read(2) returns just the 64-bit counter.
	var buf [8]byte
	n, err := unix.Read(e.fd, buf[:])
	if err != nil {
		return 0, err
	}
	if n != len(buf) {
		return 0, fmt.Errorf("short read of perf counter: %d bytes", n)
	}
	return binary.NativeEndian.Uint64(buf[:]), nil
}

func (e *perfEvent) Close() error { return unix.Close(e.fd) }
