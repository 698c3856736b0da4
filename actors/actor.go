package actors

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// Local messages: they never leave the member, so plain structs are fine.
type (
	attemptDone struct {
		res *runtime.Result
		err error
		// store is the attempt's store handle, kept while the run is parked;
		// reused tells that the attempt started from a kept one.
		store  runtime.Store
		reused bool
		// untracked: the attempt could not put its run in the active set
		// (and did nothing else).
		untracked bool
	}
	tick  struct{ reason string }
	ended struct{}
)

// runActor is the virtual actor of one run. It holds no goroutine while
// the run is parked; the attempt runs off the mailbox and reports back.
type runActor struct {
	n       *Node
	m       *member // the member this activation lives on
	session string
	run     string
	running bool
	pending bool // a wake arrived during an attempt
	done    bool
	stopped bool // a Stop arrived: the attempt's end is not a failure
	// untracked: the API created the run but could not put it in the
	// active set; attempts put it there first, until one has.
	untracked bool
	// ending: the end of the failed run is being written; the actor
	// stays (it does not passivate) until it is.
	ending  bool
	cancel  context.CancelFunc
	timer   *time.Timer
	retries int
	// store is the last attempt's handle while the run is parked and the
	// actor live: the next attempt (a child finished, a deadline) starts
	// from it without a new lease. Dropped on any other outcome and with
	// the actor.
	store runtime.Store
}

// keepStoreBytes bounds what a parked, live actor keeps of its store
// handle (its last checkpoint; the window is shed) until it passivates: a
// larger one is opened again at the next attempt. Parked runs are many;
// the bound keeps a burst of them within IdleTimeout from holding much.
const keepStoreBytes = 16 << 10

// reasonReopen: an attempt from a kept handle was fenced out; the next
// one opens the run afresh.
const reasonReopen = "reopen"

// shedder is a store handle that can drop its caches to be kept.
type shedder interface{ Shed() int }

func (a *runActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *cluster.ClusterInit:
		a.session, a.run, _ = strings.Cut(m.Identity.Identity, ".")
		a.m.setLocal(m.Identity.Identity, true)
		ctx.SetReceiveTimeout(a.n.cfg.IdleTimeout)
	case *actorspb.Wake:
		a.wake(ctx, fromWire(m.Reason).String())
		respond(ctx)
	case *actorspb.ChildFinished:
		a.wake(ctx, "child finished")
		respond(ctx)
	case *actorspb.Stop:
		a.stopped = true
		if a.cancel != nil {
			a.cancel()
		}
		if !a.running {
			a.done = true
			ctx.Stop(ctx.Self())
		}
		respond(ctx)
	case *attemptDone:
		a.finish(ctx, m)
	case *tick:
		a.timer = nil
		a.wake(ctx, m.reason)
	case *ended:
		a.done = true
		ctx.Stop(ctx.Self())
	case *actor.ReceiveTimeout:
		if !a.running && a.timer == nil && !a.ending {
			ctx.Stop(ctx.Self()) // passivate: the run's state is in the log
			return
		}
		// Busy (an attempt longer than the idle timeout, a retry waiting,
		// the end of a failed run being written):
		// protoactor-go cancels the receive timeout when it fires, so it
		// must be armed again, or the actor would never passivate and a run
		// that parks after a long model call would stay in memory for good.
		ctx.SetReceiveTimeout(a.n.cfg.IdleTimeout)
	case *actor.Stopping:
		// Work in hand (an attempt, a retry) while the actor is stopped
		// from outside: a topology change moved the run to another member
		// (disthash poisons what a member no longer owns). The new owner
		// gets the wake, activates the run and takes its lease.
		handoff := !a.done && !a.stopped && (a.running || a.timer != nil)
		if a.cancel != nil {
			a.cancel()
		}
		if a.timer != nil {
			a.timer.Stop()
		}
		if handoff && a.m.ctx.Err() == nil {
			a.n.mu.Lock()
			closed := a.n.closed
			a.n.mu.Unlock()
			if !closed {
				a.n.logger.Info("actors: run moved to another member; handing it over", "run", a.run, "member", a.m.id)
				reason := "moved"
				if a.untracked { // the next owner must put it in the active set first too
					reason = reasonUntracked
				}
				a.n.wake(a.session, a.run, reason)
			}
		}
	case *actor.Stopped:
		a.m.setLocal(identity(a.session, a.run), false)
	}
}

func respond(ctx actor.Context) {
	if ctx.Sender() != nil {
		ctx.Respond(&actorspb.Ack{Ok: true})
	}
}

func (a *runActor) wake(ctx actor.Context, reason string) {
	if reason == reasonUntracked {
		a.untracked = true
	}
	if a.done || a.m.ctx.Err() != nil { // the member stopped: the run's next owner resumes it
		return
	}
	if a.running {
		a.pending = true
		if testHookPending != nil {
			testHookPending(a.run)
		}
		return
	}
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.n.logger.Debug("actors: attempt starts", "run", a.run, "reason", reason)
	attemptCtx, cancel := context.WithCancel(a.m.ctx)
	a.cancel, a.running, a.pending = cancel, true, false
	self, root := ctx.Self(), ctx.ActorSystem().Root
	n, m, session, run, kept, untracked := a.n, a.m, a.session, a.run, a.store, a.untracked
	a.store = nil
	n.mu.Lock()
	if n.closed { // draining: no new attempt; the next owner resumes
		n.mu.Unlock()
		cancel()
		a.cancel, a.running = nil, false
		return
	}
	n.attempts.Add(1)
	n.mu.Unlock()
	go func() {
		if untracked {
			if err := n.markActive(attemptCtx, session, run); err != nil {
				n.attempts.Done()
				root.Send(self, &attemptDone{err: err, untracked: true})
				return
			}
		}
		res, store, err := n.attempt(attemptCtx, m, session, run, reason, kept)
		root.Send(self, &attemptDone{res: res, err: err, store: store, reused: kept != nil})
	}()
}

// finish decides what follows an attempt.
func (a *runActor) finish(ctx actor.Context, m *attemptDone) {
	a.running = false
	a.untracked = a.untracked && m.untracked
	if a.cancel != nil {
		a.cancel()
		a.cancel = nil
	}
	err := m.err
	a.n.logger.Debug("actors: attempt ended", "run", a.run, "err", err)
	self, root := ctx.Self(), ctx.ActorSystem().Root
	switch {
	case err == nil:
		// Completed and committed; the completion consumer tells the parent.
		a.done = true
		ctx.Stop(self)
	case errors.Is(err, runtime.ErrWaiting):
		a.retries = 0
		if sh, ok := m.store.(shedder); ok && sh.Shed() <= keepStoreBytes {
			a.store = m.store
		}
		if a.pending {
			a.wake(ctx, "woken while running")
			return
		}
		wait := ""
		if m.res != nil {
			wait = m.res.WaitCallID
		}
		a.armDeadline(wait)
	case errors.Is(err, runtime.ErrDrained):
		// The node is closing; the next owner resumes from this commit.
	case errors.Is(err, errEnded), a.stopped:
		a.done = true
		ctx.Stop(self)
	case m.reused && (errors.Is(err, runtime.ErrLeaseLost) || errors.Is(err, runtime.ErrConflict)):
		// Someone wrote to the session since the kept handle's last commit
		// (another node's activation, a cancellation): what a fresh
		// activation would have done with this wake is decided by one.
		a.wake(ctx, reasonReopen)
	case errors.Is(err, runtime.ErrLeaseLost), errors.Is(err, runtime.ErrConflict), errors.Is(err, runtime.ErrSessionBusy):
		// Another owner holds the run, or it was cancelled: the log decides
		// and this activation stops.
		a.n.logger.Info("actors: attempt fenced out", "run", a.run, "err", err)
		a.done = true
		ctx.Stop(self)
	case permanent(err) || a.retries >= a.n.cfg.MaxRetries:
		a.n.logger.Warn("actors: run failed", "run", a.run, "err", err)
		a.done, a.ending = true, true
		n, mctx, session, run := a.n, a.m.ctx, a.session, a.run
		go func() {
			n.endFailed(mctx, session, run, err.Error())
			root.Send(self, &ended{})
		}()
	default:
		a.retries++
		delay := time.Duration(1<<min(a.retries, 6)) * 100 * time.Millisecond
		a.n.logger.Info("actors: attempt failed, retrying", "run", a.run, "in", delay, "err", err)
		a.timer = time.AfterFunc(delay, func() { root.Send(self, &tick{reason: "retry"}) })
	}
}

// endFailed writes the end of a run that failed, trying again until it is
// written or ctx (the member's) ends: a failed run whose end is not in the
// log reads as running, and its parent is never told. A member that stops
// first leaves the run active, and its next owner resumes it, fails it
// again and writes the end.
func (n *Node) endFailed(ctx context.Context, sessionID, runID, reason string) {
	delay := 100 * time.Millisecond
	for {
		_, err := n.log.endRun(ctx, sessionID, runID, runtime.StatusFailed, reason)
		if err == nil || ctx.Err() != nil {
			return
		}
		n.logger.Warn("actors: write the end of a failed run; trying again", "run", runID, "in", delay, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// armDeadline schedules a wake at the deadline of the wait the run parked
// on (wait, its call ID), or at its root's wall-clock deadline if that is
// earlier. Only that wait's: the run's earlier waits are over, and a
// deadline of theirs that has passed would wake the run at once, again at
// every park. The timer belongs to the node, not the actor, so the actor
// can be passivated while it waits; the deadlines are durable, so a
// restarted node arms them again when the run's first attempt parks. When
// they cannot be read, the run is woken again soon to read them anew:
// it must not sleep past them.
func (a *runActor) armDeadline(wait string) {
	ctx := context.Background()
	dl, err := a.n.waits.deadline(ctx, a.run, wait)
	if err == nil {
		// The root's wall-clock budget ends a parked run too: wake it
		// then, and the attempt fails at once on the expired deadline.
		var rec *events.Run
		if rec, err = a.n.log.readRun(ctx, a.session, a.run); err == nil && rec != nil {
			var root time.Time
			if root, err = a.n.ledger.deadline(ctx, rec, nil); err == nil && !root.IsZero() && (dl.IsZero() || root.Before(dl)) {
				dl = root
			}
		}
	}
	if err != nil {
		// Real time, as the deadline timers run on; the wait's deadline if
		// it was read and is sooner.
		a.n.logger.Warn("actors: read the deadlines of a parked run; reading them again shortly", "run", a.run, "err", err)
		if retry := time.Now().Add(deadlineRetry); dl.IsZero() || retry.Before(dl) {
			dl = retry
		}
	}
	if !dl.IsZero() {
		a.n.wakeAt(a.session, a.run, dl)
	}
}

// deadlineRetry is how soon a parked run whose deadlines could not be read
// is woken to read them again.
const deadlineRetry = 5 * time.Second

func permanent(err error) bool {
	return errors.Is(err, errPermanent) || errors.Is(err, ErrBudget) || errors.Is(err, runtime.ErrInvalidInput) ||
		errors.Is(err, runtime.ErrContractMismatch)
}
