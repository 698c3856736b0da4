package actors

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One entry per run, the earliest deadline kept; every due run fires once,
// in deadline order; a stopped scheduler fires nothing.
func TestDeadlinesKeepTheEarliestPerRun(t *testing.T) {
	var mu sync.Mutex
	var fired []string
	done := make(chan struct{}, 10)
	var skew atomic.Int64 // added to the clock
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	d := newDeadlines(clock, func(_, run string) {
		mu.Lock()
		fired = append(fired, run)
		mu.Unlock()
		done <- struct{}{}
	})
	now := time.Now()
	d.add("s", "late", now.Add(300*time.Millisecond))
	d.add("s", "a", now.Add(time.Hour))
	d.add("s", "a", now.Add(100*time.Millisecond)) // earlier: replaces
	d.add("s", "a", now.Add(2*time.Hour))          // later: ignored
	d.add("s", "b", now.Add(200*time.Millisecond))
	d.add("s", "never", now.Add(time.Hour))
	for i := 0; i < 3; i++ {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %v fired", fired)
		}
	}
	mu.Lock()
	if len(fired) != 3 || fired[0] != "a" || fired[1] != "b" || fired[2] != "late" {
		t.Errorf("fired %v, want [a b late]", fired)
	}
	mu.Unlock()
	d.mu.Lock()
	if len(d.byRun) != 1 || len(d.h) != 1 {
		t.Errorf("%d entries, %d in the heap; want the one not due", len(d.byRun), len(d.h))
	}
	d.mu.Unlock()
	d.add("s", "soon", time.Now().Add(20*time.Millisecond))
	d.stop()
	// The timer's callback, had it been running as stop returned or ran
	// late, finds nothing to fire however late it runs.
	skew.Store(int64(24 * time.Hour))
	d.expire()
	mu.Lock()
	defer mu.Unlock()
	if len(fired) != 3 {
		t.Errorf("fired after stop: %v", fired)
	}
}
