package symbolize

// resolved is a file-relative symbolisation result, shared by every process
// that maps the file. One address can give several (inlining).
type resolved struct {
	function string
	file     string
	line     int
	inlined  bool
}

// maxResultsPerFile bounds each file's address cache. When full it is
// dropped wholesale: simpler than an LRU, and re-resolving is cheap next to
// the parse the file cache saves.
const maxResultsPerFile = 1 << 14

// resultBytes is what one cached result costs (the map entry, the slice and
// a demangled name); resultChargeStep how far the cache grows between two
// updates of its file's charge.
const (
	resultBytes      = 160
	resultChargeStep = 256 << 10
)

// resultCache memoises resolve per ELF virtual address. A nil slice is a
// cached miss.
type resultCache struct {
	m     map[uint64][]resolved
	bytes int64
}

func (c *resultCache) get(vaddr uint64) ([]resolved, bool) {
	r, ok := c.m[vaddr]
	return r, ok
}

func (c *resultCache) put(vaddr uint64, r []resolved) {
	if c.m == nil || len(c.m) >= maxResultsPerFile {
		c.m, c.bytes = make(map[uint64][]resolved), 0
	}
	if _, ok := c.m[vaddr]; !ok {
		c.bytes += resultBytes
	}
	c.m[vaddr] = r
}
