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
// A script's watchdog owns no goroutine and no timer: the deadline and the
// heap are checked by one poller for every running script of the process
// (the poller below), and ctx's end is a context.AfterFunc. A goroutine per
// script, started at its start and waited for at its end, put two
// goroutine hand-offs on every script's path; a timer per script instead,
// armed earlier than any other, woke the network poller on another core,
// and after a commit's idle wait made a trivial script 32% slower than the
// goroutine did (BenchmarkTrivialScriptAfterWait). The poller costs
// neither.
type watchdog struct {
	vm        interrupter
	lim       Limits
	threshold uint64    // heap bytes past which the script is stopped
	deadline  time.Time // zero: none (tests)

	mu      sync.Mutex // guards what follows and orders fire against stop
	stopped bool       // stop was called: no interrupt from now on
	st      stop       // written once, before fired is closed
	fired   chan struct{}
	ctxStop func() bool
}

// interrupter is what the watchdog needs of the VM (*goja.Runtime).
type interrupter interface{ Interrupt(v any) }

func startWatchdog(ctx context.Context, vm *goja.Runtime, lim Limits, absoluteHeap bool) *watchdog {
	threshold := uint64(lim.MemoryBytes)
	if !absoluteHeap {
		threshold += heapBytes()
	}
	w := &watchdog{vm: vm, lim: lim, threshold: threshold, deadline: time.Now().Add(lim.Timeout), fired: make(chan struct{})}
	w.mu.Lock()
	w.ctxStop = context.AfterFunc(ctx, func() {
		w.fire(stop{kind: "cancelled", msg: "the script was cancelled: " + context.Cause(ctx).Error()})
	})
	w.mu.Unlock()
	watched.add(w)
	return w
}

// check stops the script when heap is past its threshold or its deadline
// has passed at now. The poller calls it.
func (w *watchdog) check(now time.Time, heap uint64) {
	switch {
	case heap > w.threshold:
		w.fire(stop{kind: "limit", msg: fmt.Sprintf("memory limit exceeded: the JavaScript heap passed %d MiB", w.lim.MemoryBytes>>20)})
	case !w.deadline.IsZero() && !now.Before(w.deadline):
		w.fire(stop{kind: "timeout", msg: fmt.Sprintf("the script exceeded its time limit of %s", w.lim.Timeout)})
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

// reason is the stop reason, or nil while the script may run.
func (w *watchdog) reason() *stop {
	select {
	case <-w.fired:
		return &w.st
	default:
		return nil
	}
}

// stop ends the watchdog: once it returns no Interrupt lands except one
// already issued (the caller clears that). A check or a cancellation that
// comes after it finds the watchdog stopped and does nothing.
func (w *watchdog) stop() {
	watched.remove(w)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.ctxStop != nil {
		w.ctxStop()
	}
}

// watched is the process's running scripts' watchdogs.
var watched = &poller{}

// poller checks every registered watchdog each heapPoll, reading the heap
// once for all of them, on one goroutine that runs while any is
// registered: it starts with the first and ends at the first tick that
// finds none.
type poller struct {
	mu      sync.Mutex
	ws      map[*watchdog]struct{}
	running bool
}

func (p *poller) add(w *watchdog) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ws == nil {
		p.ws = map[*watchdog]struct{}{}
	}
	p.ws[w] = struct{}{}
	if !p.running {
		p.running = true
		go p.run()
	}
}

func (p *poller) remove(w *watchdog) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ws, w)
}

// run checks the watchdogs under p.mu, holding no reference to one
// outside it: once remove has returned, the poller never reaches that
// watchdog, its VM or its script's globals again, so they are garbage as
// soon as their script's end drops them (a worker collects a reset
// realm's heap at once, before the next script's absolute heap check; a
// list of the watchdogs kept from tick to tick held a finished one's VM,
// and the next script was stopped at the limit for the old heap).
func (p *poller) run() {
	tick := time.NewTicker(heapPoll)
	defer tick.Stop()
	for range tick.C {
		heap, now := heapBytes(), time.Now()
		p.mu.Lock()
		if len(p.ws) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		for w := range p.ws {
			w.check(now, heap) // takes w.mu: never held while p.mu is taken
		}
		p.mu.Unlock()
	}
}

// heapBytes reads heapMetric.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
