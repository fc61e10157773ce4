package tokenizer

import (
	"strings"
	"sync"
	"sync/atomic"
)

// The reference caches words shorter than 256 bytes, up to 10,000 of them.
const (
	cacheMaxWord    = 256
	cacheMaxEntries = 10000
)

// wordCache maps words to their ids, for up to cacheMaxEntries words. Reads of the published
// snapshot take no lock; new words wait in pending, under the lock, until the next snapshot
// (snapshots are copied when pending reaches half their size, so the copying stays linear).
type wordCache struct {
	snapshot atomic.Pointer[map[string][]int32]
	mu       sync.Mutex
	pending  map[string][]int32
	size     int
}

func (c *wordCache) get(word string) ([]int32, bool) {
	if snap := c.snapshot.Load(); snap != nil {
		if ids, ok := (*snap)[word]; ok {
			return ids, true
		}
	}
	c.mu.Lock()
	ids, ok := c.pending[word]
	c.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.size >= cacheMaxEntries {
		return
	}
	if c.pending == nil {
		c.pending = map[string][]int32{}
	}
	if _, ok := c.pending[word]; ok {
		return
	}
	c.pending[strings.Clone(word)] = ids // a copy: word points into the caller's text
	c.size++
	old := c.snapshot.Load()
	n := 0
	if old != nil {
		n = len(*old)
	}
	if len(c.pending) < max(64, n/2) && c.size < cacheMaxEntries {
		return
	}
	snap := make(map[string][]int32, n+len(c.pending))
	if old != nil {
		for k, v := range *old {
			snap[k] = v
		}
	}
	for k, v := range c.pending {
		snap[k] = v
	}
	c.snapshot.Store(&snap)
	c.pending = nil
}
