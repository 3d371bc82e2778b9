package unwind

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Names of the maps in agent/bpf/include/unwind.h. A program that includes
// the header gets its own placeholders under these names; Maps.Replace
// swaps them for the shared ones.
const (
	mapTables   = "unwind_tables"
	mapMappings = "unwind_mappings"
	mapProcs    = "unwind_procs"
	mapStats    = "unwind_stats"
	mapScratch  = "unwind_scratch_map"
	mapCache    = "unwind_cache"
	mapGen      = "unwind_gen"
)

// Flags of bpf(2) (include/uapi/linux/bpf.h).
const (
	bpfFNoPrealloc = 1 << 0
	bpfFInnerMap   = 1 << 12
)

// Sizes in agent/bpf/include/unwind.h; TestLayoutMatchesHeader holds them to
// the compiled header.
const (
	mappingKeySize = 16   // struct unwind_mapping_key
	mappingValSize = 40   // struct unwind_mapping
	procValSize    = 32   // struct unwind_proc
	scratchSize    = 2152 // struct unwind_scratch
	cacheEntrySize = 24   // struct unwind_cache_entry
	cacheEntries   = 1 << 10
	pageShift      = 9 // UNWIND_PAGE_SHIFT
)

// MapNames are the names of the maps of agent/bpf/include/unwind.h, which
// the Loader creates and Maps.Replace hands to a program.
func MapNames() []string {
	return []string{mapTables, mapMappings, mapProcs, mapStats, mapScratch, mapCache, mapGen}
}

// maxMapEntries caps the sizes of the maps Options sets.
const maxMapEntries = 1 << 24

// Mapping kinds (enum unwind_mapping_kind).
const (
	mappingTable        = 1
	mappingFramePointer = 2
)

func mapSpecs(o Options) map[string]*ebpf.MapSpec {
	return map[string]*ebpf.MapSpec{
		mapTables: {
			Name: mapTables, Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: uint32(o.MaxTables), // #nosec G115 -- at most maxMapEntries (withDefaults)
			// Each table is its own array, sized to fit (BPF_F_INNER_MAP
			// lets inner maps differ in max_entries), so that unloading a
			// file frees exactly its memory and nothing fragments.
			InnerMap: &ebpf.MapSpec{Name: "unwind_table", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1, Flags: bpfFInnerMap},
		},
		// #nosec G115 -- both at most maxMapEntries (withDefaults)
		mapMappings: {Name: mapMappings, Type: ebpf.LPMTrie, KeySize: mappingKeySize, ValueSize: mappingValSize, MaxEntries: uint32(o.MaxMappings), Flags: bpfFNoPrealloc},
		mapProcs:    {Name: mapProcs, Type: ebpf.Hash, KeySize: 4, ValueSize: procValSize, MaxEntries: uint32(o.MaxProcesses)}, // #nosec G115 -- at most maxMapEntries (withDefaults)
		mapStats:    {Name: mapStats, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: statMax},
		mapScratch:  {Name: mapScratch, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: scratchSize, MaxEntries: 3}, // unwind.h UNWIND_SLOTS
		mapCache:    {Name: mapCache, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: cacheEntrySize, MaxEntries: cacheEntries},
		mapGen:      {Name: mapGen, Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1},
	}
}

// Maps are the unwinder's BPF maps, shared by every program that includes
// agent/bpf/include/unwind.h.
type Maps struct {
	tables, mappings, procs, stats, scratch, cache, gen *ebpf.Map
}

func (m *Maps) all() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		mapTables: m.tables, mapMappings: m.mappings, mapProcs: m.procs, mapStats: m.stats,
		mapScratch: m.scratch, mapCache: m.cache, mapGen: m.gen,
	}
}

func newMaps(o Options) (*Maps, error) {
	specs := mapSpecs(o)
	m := &Maps{}
	for name, dst := range map[string]**ebpf.Map{
		mapTables: &m.tables, mapMappings: &m.mappings, mapProcs: &m.procs, mapStats: &m.stats,
		mapScratch: &m.scratch, mapCache: &m.cache, mapGen: &m.gen,
	} {
		mp, err := ebpf.NewMap(specs[name])
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("unwind: create map %s: %w", name, err)
		}
		*dst = mp
	}
	return m, nil
}

// Replace prepares a collection spec of a program that includes
// agent/bpf/include/unwind.h: it sizes the spec's unwind maps like the
// shared ones and returns them for ebpf.CollectionOptions.MapReplacements
// (merge them into any replacements of the program's own).
func (m *Maps) Replace(spec *ebpf.CollectionSpec) (map[string]*ebpf.Map, error) {
	out := map[string]*ebpf.Map{}
	for name, mp := range m.all() {
		ms, ok := spec.Maps[name]
		if !ok {
			return nil, fmt.Errorf("unwind: program has no map %s: does it include agent/bpf/include/unwind.h?", name)
		}
		ms.MaxEntries = mp.MaxEntries()
		if err := ms.Compatible(mp); err != nil {
			return nil, fmt.Errorf("unwind: map %s differs from agent/bpf/include/unwind.h: %w", name, err)
		}
		out[name] = mp
	}
	return out, nil
}

// Close closes the maps; programs that use them keep them alive.
func (m *Maps) Close() {
	for _, mp := range m.all() {
		if mp != nil {
			mp.Close()
		}
	}
}
