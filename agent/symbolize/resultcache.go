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
const maxResultsPerFile = 1 << 16

// resultCache memoises resolve per ELF virtual address. A nil slice is a
// cached miss.
type resultCache struct {
	m map[uint64][]resolved
}

func (c *resultCache) get(vaddr uint64) ([]resolved, bool) {
	r, ok := c.m[vaddr]
	return r, ok
}

func (c *resultCache) put(vaddr uint64, r []resolved) {
	if c.m == nil || len(c.m) >= maxResultsPerFile {
		c.m = make(map[uint64][]resolved)
	}
	c.m[vaddr] = r
}
