package jsexec

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/dop251/goja"
)

// reasonAtInterrupt is a VM that records, when it is interrupted, the
// reason the watchdog gives at that moment: the VM may unwind and the
// script's end read it (realm.fail) at once.
type reasonAtInterrupt struct {
	w    *watchdog
	seen *stop
}

func (r *reasonAtInterrupt) Interrupt(any) { r.seen = r.w.reason() }

// A script the watchdog stops finds the reason as soon as it is
// interrupted. Before, fire interrupted first and published the reason
// after: a script that unwound in between was reported as "the script was
// interrupted" (an exception) instead of the limit it hit (TestLimits'
// memory case failed so under load, in fresh-clone-check).
func TestStoppedScriptFindsItsReason(t *testing.T) {
	vm := &reasonAtInterrupt{}
	w := &watchdog{vm: vm, fired: make(chan struct{})}
	vm.w = w
	w.fire(stop{kind: "limit", msg: "memory limit exceeded"})
	if vm.seen == nil || vm.seen.kind != "limit" {
		t.Fatalf("at the interrupt the reason was %v, want the limit", vm.seen)
	}
}

// countingVM counts the interrupts it receives.
type countingVM struct{ n int }

func (c *countingVM) Interrupt(any) { c.n++ }

// Once stopped, the watchdog interrupts nothing: a timer that expires as
// the script ends finds it stopped. (The VM's next script must not be
// interrupted by the last one's watchdog.)
func TestStoppedWatchdogInterruptsNothing(t *testing.T) {
	vm := &countingVM{}
	w := &watchdog{vm: vm, fired: make(chan struct{})}
	w.stop()
	w.fire(stop{kind: "timeout", msg: "late"})
	if vm.n != 0 || w.reason() != nil {
		t.Fatalf("after stop: %d interrupts, reason %v; want none", vm.n, w.reason())
	}
	w2 := &watchdog{vm: vm, fired: make(chan struct{})}
	w2.fire(stop{kind: "limit", msg: "first"})
	w2.fire(stop{kind: "timeout", msg: "second"})
	if vm.n != 1 || w2.reason().kind != "limit" {
		t.Fatalf("two fires: %d interrupts, reason %v; want one, the first", vm.n, w2.reason())
	}
}

// The watchdog stops a script when its context ends, with no goroutine of
// its own waiting for that.
func TestWatchdogStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	w := startWatchdog(ctx, goja.New(), Limits{Timeout: time.Hour, MemoryBytes: 1 << 30}, false)
	defer w.stop()
	cancel(errors.New("gone"))
	<-w.fired
	if st := w.reason(); st == nil || st.kind != "cancelled" || !strings.Contains(st.msg, "gone") {
		t.Fatalf("reason %v, want cancelled: gone", st)
	}
}

// The poller stops a script past its deadline, and one past its heap
// threshold, each with its reason.
func TestPollerStopsAtTheLimits(t *testing.T) {
	for _, c := range []struct {
		lim  Limits
		kind string
	}{
		{Limits{Timeout: time.Nanosecond, MemoryBytes: 1 << 40}, "timeout"},
		{Limits{Timeout: time.Hour, MemoryBytes: 0}, "limit"}, // absolute: any heap is past 0 bytes
	} {
		w := startWatchdog(context.Background(), goja.New(), c.lim, true)
		<-w.fired
		w.stop()
		if st := w.reason(); st.kind != c.kind {
			t.Errorf("%+v: stopped for %q (%s), want %q", c.lim, st.kind, st.msg, c.kind)
		}
	}
}

// A stopped watchdog is not held by the poller, nor its VM: a worker
// collects a reset realm's heap at once, and the next script's absolute
// heap check must not count it. Before, the poller kept the watchdogs of
// its last busy tick in a list that outlived them (here: 100 running at
// once, then one), and the next trivial script in a worker was stopped at
// the memory limit for a heap that was garbage.
func TestStoppedWatchdogHoldsNoVM(t *testing.T) {
	ctx := context.Background()
	lim := Limits{Timeout: time.Hour, MemoryBytes: 1 << 40}
	var others []*watchdog
	for range 100 {
		others = append(others, startWatchdog(ctx, goja.New(), lim, true))
	}
	vm := goja.New()
	held := weak.Make(vm)
	w := startWatchdog(ctx, vm, Limits{Timeout: time.Nanosecond, MemoryBytes: 1 << 40}, true)
	<-w.fired // a tick of the poller saw it with the others
	w.stop()
	for _, o := range others[1:] {
		o.stop()
	}
	defer others[0].stop() // the poller goes on with one
	vm, w = nil, nil
	runtime.GC()
	runtime.GC()
	if held.Value() != nil {
		t.Fatal("the VM of a stopped watchdog is still reachable after a collection")
	}
}
