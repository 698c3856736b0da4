package jsexec

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// heapPoll is how often the watchdog reads the heap size. A probe measured
// an overshoot of up to ~2x the threshold for string doubling at 2 ms.
const heapPoll = 2 * time.Millisecond

// heapMetric is the heap occupied by objects, live or not yet swept.
const heapMetric = "/memory/classes/heap/objects:bytes"

// stop is why a script was stopped before it finished.
type stop struct {
	kind string // timeout, limit, cancelled
	msg  string
}

// watchdog stops one script: at its deadline, when ctx ends, when the heap
// passes the memory limit, or when a binding trips a limit (fire from the
// VM goroutine). Stopping means recording the reason, interrupting the VM
// (which unwinds it the next time it runs JavaScript) and closing fired
// (which wakes the event loop if it is waiting for callbacks).
//
// It owns no goroutine: the deadline and the heap poll are timers whose
// functions run only when they expire, and ctx's end is a context.AfterFunc.
// A goroutine per script, started at its start and waited for at its end,
// put two goroutine hand-offs on every script's path, and after a commit's
// idle wait each of them cost a wake-up of the other core: a trivial
// script took 4-5x its time on a warm core (BenchmarkTrivialScriptAfterWait).
type watchdog struct {
	vm        interrupter
	threshold uint64 // heap bytes past which the script is stopped
	limMiB    int64

	mu      sync.Mutex // guards what follows and orders fire against stop
	stopped bool       // stop was called: no interrupt from now on
	st      stop       // written once, before fired is closed
	fired   chan struct{}
	timers  []*time.Timer
	ctxStop func() bool
}

// interrupter is what the watchdog needs of the VM (*goja.Runtime).
type interrupter interface{ Interrupt(v any) }

func startWatchdog(ctx context.Context, vm *goja.Runtime, lim Limits, absoluteHeap bool) *watchdog {
	threshold := uint64(lim.MemoryBytes)
	if !absoluteHeap {
		threshold += heapBytes()
	}
	w := &watchdog{vm: vm, threshold: threshold, limMiB: lim.MemoryBytes >> 20, fired: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timers = []*time.Timer{
		time.AfterFunc(lim.Timeout, func() {
			w.fire(stop{kind: "timeout", msg: fmt.Sprintf("the script exceeded its time limit of %s", lim.Timeout)})
		}),
		time.AfterFunc(heapPoll, w.poll),
	}
	w.ctxStop = context.AfterFunc(ctx, func() {
		w.fire(stop{kind: "cancelled", msg: "the script was cancelled: " + context.Cause(ctx).Error()})
	})
	return w
}

// poll reads the heap and stops the script past its threshold, or polls
// again heapPoll later.
func (w *watchdog) poll() {
	if heapBytes() > w.threshold {
		w.fire(stop{kind: "limit", msg: fmt.Sprintf("memory limit exceeded: the JavaScript heap passed %d MiB", w.limMiB)})
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped && w.reason() == nil {
		w.timers[1].Reset(heapPoll)
	}
}

// fire stops the script for st unless it was already stopped, or the
// watchdog was.
func (w *watchdog) fire(st stop) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.reason() != nil {
		return
	}
	w.st = st
	// Published before the interrupt: the VM unwinds as soon as it sees
	// it, and the script's end reads the reason (reason()); a reason
	// published after was missed, and a stopped script reported as merely
	// "interrupted".
	close(w.fired)
	w.vm.Interrupt(&w.st)
}

// reason is the stop reason, or nil while the script may run. It is read
// by the VM's goroutine, and by Interrupt from inside fire.
func (w *watchdog) reason() *stop {
	select {
	case <-w.fired:
		return &w.st
	default:
		return nil
	}
}

// stop ends the watchdog: once it returns no Interrupt lands except one
// already issued (the caller clears that). A timer function that runs
// after it finds the watchdog stopped and does nothing.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, t := range w.timers {
		t.Stop()
	}
	if w.ctxStop != nil {
		w.ctxStop()
	}
}

// heapBytes reads heapMetric.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
