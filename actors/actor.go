package actors

import (
	"context"
	"errors"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/runtime"
)

// Local messages: they never leave the member, so plain structs are fine.
type (
	// attemptDone reports the end of the attempt the core started.
	attemptDone struct {
		res *runtime.Result
		err error
		// store is the attempt's store handle; keepable tells it was shed
		// small enough to keep while the run is parked.
		store    runtime.Store
		keepable bool
		reused   bool
	}
	// retryFired: the retry timer of generation gen fired (a timer the
	// core disarmed since is a stale generation and ignored).
	retryFired struct{ gen uint64 }
	// endWritten: the end of the failed run is written (or the member
	// stopped trying).
	endWritten struct{}
)

// runActor is the virtual actor of one run: an adapter between
// protoactor-go and the run's lifecycle core (actors/lifecycle). Receive
// turns each message into an event for the core and performs the effects
// it returns; anything that waits on I/O (an attempt, the deadline reads,
// the end of a failed run) runs off the mailbox and reports back as a
// message. Nothing here decides what happens next: the core does.
type runActor struct {
	n       *Node
	m       *member // the member this activation lives on
	session string
	run     string
	core    *lifecycle.Run
	// cancel cancels the attempt in flight.
	cancel context.CancelFunc
	// retry is the armed retry timer, retryGen its generation.
	retry    clock.Timer
	retryGen uint64
	// kept is the store handle the core keeps for the next attempt (a
	// parked run whose next attempt, a child finished or a deadline, needs
	// no new lease); last is the handle of the attempt that just ended,
	// which KeepHandle keeps.
	kept, last runtime.Store
}

// keepStoreBytes bounds what a parked, live actor keeps of its store
// handle (its last checkpoint; the window is shed) until it passivates: a
// larger one is opened again at the next attempt. Parked runs are many;
// the bound keeps a burst of them within IdleTimeout from holding much.
const keepStoreBytes = 16 << 10

// shedder is a store handle that can drop its caches to be kept.
type shedder interface{ Shed() int }

func (a *runActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *cluster.ClusterInit:
		a.session, a.run, _ = strings.Cut(m.Identity.Identity, ".")
		a.core = lifecycle.New(lifecycle.Config{MaxRetries: a.n.cfg.MaxRetries})
		a.m.setLocal(m.Identity.Identity, true)
		ctx.SetReceiveTimeout(a.n.cfg.IdleTimeout)
	case *actorspb.Wake:
		respond(ctx, a.woken(ctx, fromWire(m.Reason)))
	case *actorspb.ChildFinished:
		respond(ctx, a.woken(ctx, lifecycle.ReasonChildFinished))
	case *actorspb.Stop:
		a.step(ctx, lifecycle.CancelRequested{})
		respond(ctx, true)
	case *attemptDone:
		outcome := outcomeOf(m.err)
		switch outcome {
		case lifecycle.FencedOut:
			a.n.logger.Info("actors: attempt fenced out", "run", a.run, "err", m.err)
		case lifecycle.Transient, lifecycle.Unavailable, lifecycle.NotYetCreated:
			a.n.logger.Info("actors: attempt failed", "run", a.run, "outcome", outcome, "err", m.err)
		case lifecycle.Unreadable:
			a.n.logger.Error("actors: run parked unread: its log has an event of a newer schema than this build reads; "+
				"a node of a newer build resumes it (do not roll back past the build that wrote it)",
				"run", a.run, "session", a.session, "reads_up_to", events.SchemaVersion, "err", m.err)
		}
		if outcome == lifecycle.Unreadable {
			a.n.unreadable.Store(a.run, errText(m.err))
		} else {
			a.n.unreadable.Delete(a.run)
		}
		a.last = m.store
		a.step(ctx, lifecycle.AttemptEnded{Outcome: outcome, Err: errText(m.err), Reused: m.reused, Keepable: m.keepable, WaitCallID: waitCallID(m.res)})
		a.last = nil
	case *retryFired:
		if m.gen == a.retryGen {
			a.retry = nil
			a.step(ctx, lifecycle.RetryFired{})
		}
	case *endWritten:
		a.step(ctx, lifecycle.EndWritten{})
	case *actor.ReceiveTimeout:
		a.step(ctx, lifecycle.IdleTimeout{})
	case *actor.Stopping:
		// Stopped from outside while the core is not done: a topology
		// change moved the run to another member (disthash poisons what a
		// member no longer owns), or the member is stopping.
		if a.core != nil && a.core.State() != lifecycle.Done {
			if a.closing() {
				a.step(ctx, lifecycle.Drain{})
			}
			a.step(ctx, lifecycle.MovedAway{})
		}
	case *actor.Stopped:
		if a.cancel != nil {
			a.cancel()
		}
		a.disarmRetry()
		a.m.setLocal(identity(a.session, a.run), false)
	}
}

// respond answers a request; ok false says it was not taken and the
// sender keeps it (a completion goes back to its consumer, a wake is
// retried and reaches the run's next owner).
func respond(ctx actor.Context, ok bool) {
	if ctx.Sender() != nil {
		ctx.Respond(&actorspb.Ack{Ok: ok})
	}
}

// closing reports whether the node or the member is stopping: nothing
// starts then, and the next owner resumes the run.
func (a *runActor) closing() bool {
	if a.m.ctx.Err() != nil {
		return true
	}
	a.n.mu.Lock()
	defer a.n.mu.Unlock()
	return a.n.closed
}

// woken feeds a wake to the core and reports whether it was taken. A
// draining activation starts nothing and owes nothing after the drain, so
// it gives the wake back: answered as taken, a child's end was
// acknowledged to its consumer and never delivered again, and the parent,
// parked on a read made before the child ended, waited for a sweep that
// might already have run (TestChildEndReachingADrainingParentIsGivenBack).
func (a *runActor) woken(ctx actor.Context, reason lifecycle.Reason) bool {
	if a.closing() {
		a.step(ctx, lifecycle.Drain{})
		return false
	}
	if h := a.n.cfg.Hooks.Pending; h != nil && a.core.State() == lifecycle.Running {
		h(a.run)
	}
	a.step(ctx, lifecycle.Woken{Reason: reason})
	return true
}

// step feeds ev to the core and performs its effects, in order.
func (a *runActor) step(ctx actor.Context, ev lifecycle.Event) {
	effs := a.core.Step(a.n.now(), ev)
	if len(effs) > 0 {
		a.n.logger.Debug("actors: run lifecycle", "run", a.run, "event", ev, "effects", effs, "state", a.core.State())
	}
	for _, eff := range effs {
		a.perform(ctx, eff)
	}
}

func (a *runActor) perform(ctx actor.Context, eff lifecycle.Effect) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	n, m, session, run := a.n, a.m, a.session, a.run
	switch e := eff.(type) {
	case lifecycle.StartAttempt:
		var kept runtime.Store
		if e.Reuse {
			kept = a.kept
		}
		a.kept = nil
		attemptCtx, cancel := context.WithCancel(m.ctx)
		a.cancel = cancel
		n.mu.Lock()
		if n.closed { // draining: no new attempt; the next owner resumes
			n.mu.Unlock()
			root.Send(self, &attemptDone{err: runtime.ErrDrained})
			return
		}
		n.attempts.Add(1)
		n.mu.Unlock()
		n.logger.Debug("actors: attempt starts", "run", run, "reason", e.Reason)
		go func() {
			res, store, err := n.attempt(attemptCtx, m, session, run, e.Reason, kept)
			if err == nil && res != nil && res.Reply != nil {
				n.notify(run)
			}
			keepable := false
			if errors.Is(err, runtime.ErrWaiting) {
				// Off the mailbox: shedding walks the handle's caches.
				sh, ok := store.(shedder)
				keepable = ok && sh.Shed() <= keepStoreBytes
			}
			root.Send(self, &attemptDone{res: res, err: err, store: store, keepable: keepable, reused: kept != nil})
		}()
	case lifecycle.CancelAttempt:
		if a.cancel != nil {
			a.cancel()
		}
	case lifecycle.ArmRetry:
		a.disarmRetry()
		a.retryGen++
		gen := a.retryGen
		a.retry = n.cfg.Clock.AfterFunc(e.At.Sub(n.now()), func() { root.Send(self, &retryFired{gen: gen}) })
	case lifecycle.DisarmRetry:
		a.disarmRetry()
	case lifecycle.ArmDeadline:
		go n.armDeadline(m.ctx, session, run, e.WaitCallID)
	case lifecycle.KeepHandle:
		a.kept = a.last
	case lifecycle.DropHandle:
		a.kept = nil
	case lifecycle.WriteEnd:
		n.logger.Warn("actors: run failed", "run", run, "err", e.Reason)
		go func() {
			n.endFailed(m.ctx, session, run, e.Reason)
			root.Send(self, &endWritten{})
		}()
	case lifecycle.HandOver:
		n.logger.Info("actors: run moved to another member; handing it over", "run", run, "member", m.id)
		n.wake(session, run, e.Reason)
	case lifecycle.Passivate:
		ctx.Stop(self) // the run's state is in the log
	case lifecycle.RearmIdle:
		// protoactor-go disarms the receive timeout when it fires.
		ctx.SetReceiveTimeout(n.cfg.IdleTimeout)
	}
}

func (a *runActor) disarmRetry() {
	if a.retry != nil {
		a.retry.Stop()
		a.retry = nil
	}
	a.retryGen++
}
