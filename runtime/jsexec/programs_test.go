package jsexec

import (
	"fmt"
	"testing"
)

// The cache returns the same program for the same source, keeps at most
// its bounds (least recently used out first), does not keep a script that
// fails to compile, and does not let one large script evict the rest.
func TestProgramCacheBounds(t *testing.T) {
	c := newProgramCache(3, 1000)
	p1, err := c.compile("return 1")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.compile("return 1"); again != p1 {
		t.Error("same source compiled twice")
	}
	for i := 2; i <= 4; i++ {
		if _, err := c.compile(fmt.Sprintf("return %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := c.c.Get("return 1"); ok || c.c.Len() != 3 {
		t.Errorf("%d entries, oldest kept: %v; want 3, the oldest out", c.c.Len(), ok)
	}
	if _, err := c.compile("return ((("); err == nil {
		t.Error("a syntax error compiled")
	}
	if _, ok := c.c.Get("return ((("); ok {
		t.Error("a failed compile was kept")
	}
	big := "return '" + string(make([]byte, 400)) + "'"
	if _, err := c.compile(big); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.c.Get(big); ok || c.c.Len() != 3 {
		t.Errorf("a script over a quarter of the byte bound was kept (%d entries)", c.c.Len())
	}
}
