package lru

import (
	"fmt"
	"sync"
	"testing"
)

func TestBoundsAndOrder(t *testing.T) {
	c := New[string, int](3, 100)
	for i, k := range []string{"a", "b", "c"} {
		c.Add(k, i, 10)
	}
	if _, ok := c.Get("a"); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.Add("d", 3, 10) // evicts b, the least recently used
	if _, ok := c.Get("b"); ok {
		t.Error("b kept past maxItems")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("%s evicted", k)
		}
	}
	c.Add("a", 99, 10) // the first value stays
	if v, _ := c.Get("a"); v != 0 {
		t.Errorf("a = %d after a second Add, want the first value 0", v)
	}
	c.Add("big", 1, 26) // above a quarter of maxBytes: not kept
	if _, ok := c.Get("big"); ok {
		t.Error("an entry above a quarter of maxBytes was kept")
	}
	// By bytes: three entries of 25 fit in 100, a fourth and fifth push out the oldest.
	b := New[int, int](100, 100)
	for i := 0; i < 5; i++ {
		b.Add(i, i, 25)
	}
	if b.Len() != 4 {
		t.Errorf("%d entries of 25 bytes in 100, want 4", b.Len())
	}
	if _, ok := b.Get(0); ok {
		t.Error("the oldest entry kept past maxBytes")
	}
}

func TestConcurrentUse(t *testing.T) {
	c := New[string, int](64, 1<<20)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				k := fmt.Sprint(i % 100)
				c.Add(k, i, 8)
				c.Get(k)
			}
		}(g)
	}
	wg.Wait()
	if c.Len() > 64 {
		t.Fatalf("%d entries, bound 64", c.Len())
	}
}

func TestTake(t *testing.T) {
	c := New[string, int](2, 100)
	c.Add("a", 1, 25)
	c.Add("b", 2, 25)
	if v, ok := c.Take("a"); !ok || v != 1 {
		t.Fatalf("Take(a) = %d, %v; want 1, true", v, ok)
	}
	if _, ok := c.Take("a"); ok {
		t.Fatal("a taken twice")
	}
	c.Add("c", 3, 25) // a's slot was given back: b stays
	for _, k := range []string{"b", "c"} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("%s evicted after a Take made room", k)
		}
	}
	// And its bytes: four of 25 fill 100; one taken, a fifth fits.
	b := New[int, int](10, 100)
	for i := 0; i < 4; i++ {
		b.Add(i, i, 25)
	}
	b.Take(0)
	b.Add(4, 4, 25)
	if b.Len() != 4 {
		t.Errorf("%d entries, want 4", b.Len())
	}
	if _, ok := b.Get(1); !ok {
		t.Error("an entry evicted after a Take made room")
	}
}
