package bpf

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
)

// EachEntry calls fn for every entry of a hash map, deleting what it read
// when del is set, many entries per system call (BPF_MAP_*_BATCH, Linux
// 5.6). The CPU sampler's drain used to cost two system calls per entry to
// read and two more to clear, the most of the agent's CPU with 32 busy
// Python processes (go run ./tools/bench/agent --load python --procs 32).
// Where the kernel has no batch operations it falls back to one entry at a
// time.
//
// The map must be quiescent (a drained generation): a batch walk of a map
// being written may miss or repeat entries.
func EachEntry[K, V any](m *ebpf.Map, del bool, fn func(*K, *V)) error {
	var v V
	// Up to 256 KiB of values per call, and never fewer than 64 entries:
	// a hash bucket larger than the batch fails it (ENOSPC); the kernel
	// seeds each map's hash, so no job can fill one bucket.
	chunk := max(64, min(1024, (256<<10)/max(1, int(unsafe.Sizeof(v)))))
	keys, vals := make([]K, chunk), make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for first := true; ; first = false {
		var n int
		var err error
		if del {
			n, err = m.BatchLookupAndDelete(&cursor, keys, vals, nil)
		} else {
			n, err = m.BatchLookup(&cursor, keys, vals, nil)
		}
		for i := range n {
			fn(&keys[i], &vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case err != nil && first && n == 0 && errors.Is(err, ebpf.ErrNotSupported):
			return eachEntrySlow(m, del, fn)
		case err != nil:
			return err
		}
	}
}

func eachEntrySlow[K, V any](m *ebpf.Map, del bool, fn func(*K, *V)) error {
	var keys []K
	var k K
	v := new(V)
	it := m.Iterate()
	for it.Next(&k, v) {
		fn(&k, v)
		if del {
			keys = append(keys, k)
		}
		v = new(V)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for i := range keys {
		if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete: %w", err)
		}
	}
	return nil
}
