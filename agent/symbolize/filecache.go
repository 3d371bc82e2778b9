package symbolize

import "container/list"

// fileIdentity identifies file contents without reading them. A binary
// replaced on disk gets a new inode or mtime, hence a new identity.
type fileIdentity struct {
	dev, ino  uint64
	size      int64
	mtimeNsec int64
}

// fileCache is an LRU of parsed files bounded by count and approximate bytes.
// It is keyed by identity, not by build id: a build id is just bytes in the
// file, and a hostile process could forge a system library's id to plant
// wrong names in other jobs' profiles. Identical files under different
// inodes are parsed twice; the bounds cap that cost.
type fileCache struct {
	maxFiles int
	maxBytes int64
	bytes    int64
	ll       *list.List // front = most recently used
	byKey    map[fileIdentity]*list.Element
	evicted  uint64
}

type cacheEntry struct {
	key fileIdentity
	obj *objFile
}

func newFileCache(maxFiles int, maxBytes int64) *fileCache {
	return &fileCache{
		maxFiles: maxFiles, maxBytes: maxBytes,
		ll: list.New(), byKey: map[fileIdentity]*list.Element{},
	}
}

func (c *fileCache) get(key fileIdentity) *objFile {
	e, ok := c.byKey[key]
	if !ok {
		return nil
	}
	c.ll.MoveToFront(e)
	return e.Value.(*cacheEntry).obj
}

func (c *fileCache) put(key fileIdentity, obj *objFile) {
	if e, ok := c.byKey[key]; ok {
		c.bytes -= e.Value.(*cacheEntry).obj.size
		e.Value.(*cacheEntry).obj = obj
		c.bytes += obj.size
		c.ll.MoveToFront(e)
	} else {
		c.byKey[key] = c.ll.PushFront(&cacheEntry{key: key, obj: obj})
		c.bytes += obj.size
	}
	// Keep the newest entry even if it alone exceeds the byte budget: it is
	// about to be used.
	for c.ll.Len() > 1 && (c.ll.Len() > c.maxFiles || c.bytes > c.maxBytes) {
		old := c.ll.Back()
		ent := old.Value.(*cacheEntry)
		c.ll.Remove(old)
		delete(c.byKey, ent.key)
		c.bytes -= ent.obj.size
		c.evicted++
	}
}
