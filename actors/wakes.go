package actors

import (
	"container/heap"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/internal/clock"
)

// wakeWorkers bounds the wake requests in flight on a node.
const wakeWorkers = 256

// wakeQueue holds wake requests for a bounded number of workers. A node
// that starts with 100,000 active runs, or a burst of spawns, queues their
// wakes at a few dozen bytes each instead of a goroutine and protoactor
// futures each: protoactor's process registry, where every request
// registers a future, is a set of Go maps that keep the size of their
// peak for as long as the node runs (measured in B5: most of a parked
// run's cost was that peak).
type wakeQueue struct {
	mu      sync.Mutex
	queue   []wakeReq
	workers int
	// retries are the wakes a request could not deliver, one timer per
	// run, each sending its wake again after wakeRetry; stopped (nil
	// after) when the node shuts down.
	retries map[string]clock.Timer
	stopped bool
}

// wakeRetry is how long a wake that could not be delivered waits before it
// is sent again. Its request retried for about 15 s already.
const wakeRetry = 5 * time.Second

type wakeReq struct {
	session, run string
	reason       lifecycle.Reason
}

// wake tells a run's actor to start or resume, without blocking the caller.
// A member that just started may not know itself as the owner of any
// identity yet: the request is retried with backoff (bounded) until it is
// delivered or the node closes.
func (n *Node) wake(sessionID, runID string, reason lifecycle.Reason) {
	q := &n.wakes
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, wakeReq{sessionID, runID, reason})
	if q.workers < wakeWorkers {
		q.workers++
		go n.wakeWorker()
	}
}

func (n *Node) wakeWorker() {
	q := &n.wakes
	for {
		q.mu.Lock()
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if len(q.queue) == 0 || closed { // closing: the next owner wakes what is active
			q.queue = nil
			q.workers--
			q.mu.Unlock()
			return
		}
		r := q.queue[0]
		q.queue[0] = wakeReq{}
		q.queue = q.queue[1:]
		q.mu.Unlock()
		if !n.request(identity(r.session, r.run), &actorspb.Wake{SessionId: r.session, RunId: r.run, Reason: wireReason(r.reason)}) {
			n.retryWake(r)
		}
	}
}

// retryWake sends r again after wakeRetry, unless the node is closing
// (the next owner wakes what is active) or the run has a retry armed
// already. A wake is not dropped because its request gave up: the owner
// may have been unreachable, or draining, for longer than the request's
// retries, with no change of topology to come that would make every
// member sweep (a parked run whose deadline's wake was lost, or a spawned
// child's first wake, waited for good).
func (n *Node) retryWake(r wakeReq) {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	q := &n.wakes
	q.mu.Lock()
	defer q.mu.Unlock()
	id := identity(r.session, r.run)
	if closed || q.stopped || q.retries[id] != nil {
		return
	}
	if q.retries == nil {
		q.retries = map[string]clock.Timer{}
	}
	n.logger.Debug("actors: a wake could not be delivered; sending it again", "run", r.run, "in", wakeRetry)
	q.retries[id] = n.cfg.Waits.AfterFunc(wakeRetry, func() {
		q.mu.Lock()
		delete(q.retries, id)
		q.mu.Unlock()
		n.wake(r.session, r.run, r.reason)
	})
}

// stopRetries stops the wakes waiting to be sent again; none is armed
// after it.
func (q *wakeQueue) stopRetries() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	for _, t := range q.retries {
		t.Stop()
	}
	q.retries = nil
}

// deadlines wakes parked runs at their wait deadlines with one timer for
// the whole node: a heap ordered by time with one entry per run (a run
// that parks again keeps its earliest deadline, where a timer per park
// piled up until each fired, a day later for a day's budget).
type deadlines struct {
	mu    sync.Mutex
	h     deadlineHeap
	byRun map[string]*deadline // by identity
	timer clock.Timer
	next  int64 // unix nanos the timer is set for; 0: none
	fire  func(sessionID, runID string)
	clock clock.Clock
	// stopped: nothing is added, armed or fired any more (a run actor
	// that parks while the node shuts down arms nothing).
	stopped bool
}

type deadline struct {
	at           int64
	session, run string
	i            int
}

type deadlineHeap []*deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *deadlineHeap) Push(x any) {
	d := x.(*deadline)
	d.i = len(*h)
	*h = append(*h, d)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}

// newDeadlines runs on clk: its time decides what is due, and its timer
// fires then (a test's fake clock drives both).
func newDeadlines(clk clock.Clock, fire func(sessionID, runID string)) *deadlines {
	return &deadlines{byRun: map[string]*deadline{}, fire: fire, clock: clk}
}

// now is the time on the deadlines' clock.
func (d *deadlines) now() time.Time { return d.clock.Now() }

// add schedules a wake of the run at at, unless an earlier one is due.
func (d *deadlines) add(sessionID, runID string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	key := identity(sessionID, runID)
	ns := at.UnixNano()
	if e := d.byRun[key]; e != nil {
		if e.at <= ns {
			return
		}
		e.at = ns
		heap.Fix(&d.h, e.i)
	} else {
		e := &deadline{at: ns, session: sessionID, run: runID}
		d.byRun[key] = e
		heap.Push(&d.h, e)
	}
	d.armLocked()
}

// armLocked sets the timer for the earliest deadline.
func (d *deadlines) armLocked() {
	if len(d.h) == 0 {
		return
	}
	first := d.h[0].at
	if d.next != 0 && d.next <= first {
		return
	}
	d.next = first
	delay := time.Duration(first-d.now().UnixNano()) + 10*time.Millisecond
	if d.timer == nil {
		d.timer = d.clock.AfterFunc(delay, d.expire)
	} else {
		d.timer.Reset(delay)
	}
}

// expire wakes every run whose deadline passed and arms the next.
func (d *deadlines) expire() {
	d.mu.Lock()
	now := d.now().UnixNano()
	var due []*deadline
	for len(d.h) > 0 && d.h[0].at <= now {
		e := heap.Pop(&d.h).(*deadline)
		delete(d.byRun, identity(e.session, e.run))
		due = append(due, e)
	}
	d.next = 0
	d.armLocked()
	d.mu.Unlock()
	for _, e := range due {
		d.fire(e.session, e.run)
	}
}

// stop stops the timer; nothing fires after it.
func (d *deadlines) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.h, d.byRun = nil, map[string]*deadline{}
}
