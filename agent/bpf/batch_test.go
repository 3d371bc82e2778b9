package bpf

import (
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// stack is laid out as a sampler's stack value: 1 KiB, so that a map of
// them takes several batches.
type stack struct {
	Ips              [127]uint64
	Len, End, Fl, Pd uint32
}

// TestIntegrationEachEntry reads and clears a full hash map in batches and
// one by one: both see every entry once, and clearing leaves it empty.
func TestIntegrationEachEntry(t *testing.T) {
	testenv.RequireIntegration(t, testenv.Root)
	for _, tc := range []struct {
		name string
		each func(*ebpf.Map, bool, func(*uint64, *stack)) error
	}{
		{"batch", EachEntry[uint64, stack]},
		{"one by one", eachEntrySlow[uint64, stack]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3000 // more than one batch (256 stacks of 1 KiB)
			m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: uint32(unsafe.Sizeof(stack{})), MaxEntries: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for i := range uint64(n) {
				v := stack{Len: 1}
				v.Ips[0] = i * 3
				if err := m.Put(i*7919+1, &v); err != nil {
					t.Fatal(err)
				}
			}
			for _, del := range []bool{false, true} {
				seen := map[uint64]int{}
				if err := tc.each(m, del, func(k *uint64, v *stack) {
					if v.Ips[0] != (*k-1)/7919*3 {
						t.Errorf("key %d has value %d", *k, v.Ips[0])
					}
					seen[*k]++
				}); err != nil {
					t.Fatal(err)
				}
				if len(seen) != n {
					t.Errorf("del=%v: saw %d keys, want %d", del, len(seen), n)
				}
				for k, c := range seen {
					if c != 1 {
						t.Errorf("key %d seen %d times", k, c)
					}
				}
			}
			var k uint64
			var v stack
			if m.Iterate().Next(&k, &v) {
				t.Errorf("map not empty after the clearing pass: key %d left", k)
			}
		})
	}
}
