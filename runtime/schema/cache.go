package schema

import (
	"container/list"
	"sync"
)

// cacheSize bounds each cache level. A node holds its definitions' schemas,
// their children's and their capabilities': a few hundred in practice.
const cacheSize = 1024

// schemaCache holds compiled schemas: by the SHA-256 of the bytes given to
// Compile (a hit costs one hash and one lookup) and by the SHA-256 of the
// canonical form (schemas that differ only in layout compile once).
var schemaCache = struct {
	bytes     *lru[*Schema]
	canonical *lru[*compiled]
}{newLRU[*Schema](cacheSize), newLRU[*compiled](cacheSize)}

// lru is a bounded least-recently-used map, safe for concurrent use.
type lru[V any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // front is the most recently used
	items map[[32]byte]*list.Element
}

type lruEntry[V any] struct {
	key   [32]byte
	value V
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, order: list.New(), items: map[[32]byte]*list.Element{}}
}

func (c *lru[V]) get(key [32]byte) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[V]).value, true
}

func (c *lru[V]) put(key [32]byte, value V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		return // keep the first: equal keys mean equal values
	}
	c.items[key] = c.order.PushFront(&lruEntry[V]{key: key, value: value})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*lruEntry[V]).key)
	}
}

func (c *lru[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
