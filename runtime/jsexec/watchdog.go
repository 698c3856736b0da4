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
type watchdog struct {
	vm    interrupter
	once  sync.Once
	st    stop // written once, before fired is closed
	fired chan struct{}
	quit  chan struct{}
	done  chan struct{}
}

// interrupter is what the watchdog needs of the VM (*goja.Runtime).
type interrupter interface{ Interrupt(v any) }

func startWatchdog(ctx context.Context, vm *goja.Runtime, lim Limits, absoluteHeap bool) *watchdog {
	w := &watchdog{vm: vm, fired: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	threshold := uint64(lim.MemoryBytes)
	if !absoluteHeap {
		threshold += heapBytes()
	}
	go w.watch(ctx, lim, threshold)
	return w
}

func (w *watchdog) watch(ctx context.Context, lim Limits, threshold uint64) {
	defer close(w.done)
	timer := time.NewTimer(lim.Timeout)
	defer timer.Stop()
	tick := time.NewTicker(heapPoll)
	defer tick.Stop()
	sample := []metrics.Sample{{Name: heapMetric}}
	for {
		select {
		case <-w.quit:
			return
		case <-w.fired:
			return
		case <-timer.C:
			w.fire(stop{kind: "timeout", msg: fmt.Sprintf("the script exceeded its time limit of %s", lim.Timeout)})
			return
		case <-ctx.Done():
			w.fire(stop{kind: "cancelled", msg: "the script was cancelled: " + context.Cause(ctx).Error()})
			return
		case <-tick.C:
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > threshold {
				w.fire(stop{kind: "limit", msg: fmt.Sprintf("memory limit exceeded: the JavaScript heap passed %d MiB", lim.MemoryBytes>>20)})
				return
			}
		}
	}
}

// fire stops the script for st unless it was already stopped.
func (w *watchdog) fire(st stop) {
	w.once.Do(func() {
		w.st = st
		// Published before the interrupt: the VM unwinds as soon as it
		// sees it, and the script's end reads the reason (reason()); a
		// reason published after was missed, and a stopped script reported
		// as merely "interrupted".
		close(w.fired)
		w.vm.Interrupt(&w.st)
	})
}

// reason is the stop reason, or nil while the script may run.
func (w *watchdog) reason() *stop {
	select {
	case <-w.fired:
		return &w.st
	default:
		return nil
	}
}

// stop ends the watchdog and waits for it, so that no Interrupt lands after
// it returns except one already issued (the caller clears that).
func (w *watchdog) stop() {
	close(w.quit)
	<-w.done
}

// heapBytes reads heapMetric.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
