package natstest

import "testing"

// Every port FreePort hands out is one it has not handed out before: a
// test that picks the ports of several servers before starting any of
// them (nothing listens on them yet) must never get the same one twice.
// With 2,000 picks among the ~12,000 ports below the ephemeral range,
// random picks alone repeat one almost surely.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 2000 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
