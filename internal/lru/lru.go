// Package lru is a bounded least-recently-used cache, safe for concurrent
// use, bounded by entries and by a size the caller gives each entry.
package lru

import (
	"container/list"
	"sync"
)

// Cache keeps at most maxItems entries whose sizes add up to at most
// maxBytes, dropping the least recently used first. An entry larger than a
// quarter of maxBytes is not kept: one large value must not evict
// everything else.
type Cache[K comparable, V any] struct {
	mu       sync.Mutex
	byKey    map[K]*list.Element
	order    *list.List // front: most recent
	bytes    int
	maxItems int
	maxBytes int
}

type entry[K comparable, V any] struct {
	key  K
	val  V
	size int
}

// New makes a cache; maxItems and maxBytes must be positive.
func New[K comparable, V any](maxItems, maxBytes int) *Cache[K, V] {
	if maxItems <= 0 || maxBytes <= 0 {
		panic("lru: maxItems and maxBytes must be positive")
	}
	return &Cache[K, V]{byKey: map[K]*list.Element{}, order: list.New(), maxItems: maxItems, maxBytes: maxBytes}
}

// Get returns the value of key and marks it used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*entry[K, V]).val, true
	}
	var zero V
	return zero, false
}

// Add keeps val under key with the given size, unless key is there
// already (the first value stays: callers cache values that never change)
// or size is above a quarter of the byte bound.
func (c *Cache[K, V]) Add(key K, val V, size int) {
	if size > c.maxBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	c.byKey[key] = c.order.PushFront(&entry[K, V]{key: key, val: val, size: size})
	c.bytes += size
	for c.order.Len() > c.maxItems || c.bytes > c.maxBytes {
		old := c.order.Remove(c.order.Back()).(*entry[K, V])
		delete(c.byKey, old.key)
		c.bytes -= old.size
	}
}

// Take returns the value of key and removes it.
func (c *Cache[K, V]) Take(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		var zero V
		return zero, false
	}
	e := c.order.Remove(el).(*entry[K, V])
	delete(c.byKey, key)
	c.bytes -= e.size
	return e.val, true
}

// Len is the number of entries kept.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
