package actors

import (
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/internal/clock"
)

// One entry per run, the earliest deadline kept; every due run fires once,
// in deadline order, when the clock reaches it and not before; a stopped
// scheduler fires nothing.
func TestDeadlinesKeepTheEarliestPerRun(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var fired []string // the fake clock fires in Advance's goroutine
	d := newDeadlines(clk, func(_, run string) { fired = append(fired, run) })
	now := clk.Now()
	d.add("s", "late", now.Add(300*time.Millisecond))
	d.add("s", "a", now.Add(time.Hour))
	d.add("s", "a", now.Add(100*time.Millisecond)) // earlier: replaces
	d.add("s", "a", now.Add(2*time.Hour))          // later: ignored
	d.add("s", "b", now.Add(200*time.Millisecond))
	d.add("s", "never", now.Add(time.Hour))
	clk.Advance(50 * time.Millisecond)
	if len(fired) != 0 {
		t.Fatalf("fired %v before any deadline", fired)
	}
	clk.Advance(time.Second)
	if got := strings.Join(fired, " "); got != "a b late" {
		t.Fatalf("fired %q, want a b late", got)
	}
	if len(d.byRun) != 1 || len(d.h) != 1 || clk.Armed() != 1 {
		t.Fatalf("%d entries, %d in the heap, %d timers; want the one not due and its timer", len(d.byRun), len(d.h), clk.Armed())
	}
	d.add("s", "soon", clk.Now().Add(20*time.Millisecond))
	d.stop()
	d.add("s", "after stop", clk.Now().Add(time.Millisecond)) // a run parking as the node stops
	clk.Advance(24 * time.Hour)
	// The timer's callback, had it been running as stop returned, finds
	// nothing to fire.
	d.expire()
	if len(fired) != 3 || clk.Armed() != 0 {
		t.Fatalf("after stop: fired %v, %d timers armed; want nothing more", fired, clk.Armed())
	}
}

// A deadline added for a time already passed fires at once (the timer
// armed for a negative delay), without the clock moving.
func TestDeadlinePassedFiresAtOnce(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	fired := make(chan string, 1)
	d := newDeadlines(clk, func(_, run string) { fired <- run })
	defer d.stop()
	d.add("s", "past", clk.Now().Add(-time.Minute))
	if run := <-fired; run != "past" {
		t.Fatalf("fired %s", run)
	}
}
