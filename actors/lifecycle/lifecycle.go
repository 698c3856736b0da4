// Package lifecycle is the pure core of a run's activation on a node: what
// a run actor does next, given what just happened to it. It is a state
// machine in the manner of etcd-io/raft's Step: Step takes the time and an
// event, changes the state and returns the effects the caller must perform
// (start an attempt, arm a timer, hand the run over, write its end,
// passivate). It does no I/O, starts no goroutine and knows nothing of
// protoactor-go or NATS, so every interleaving of wakes, attempts, timers,
// cancellations and topology changes can be driven by a test, in order,
// under the race detector (testdata/*.txt, and a seeded random test
// against the invariants in invariants.go).
//
// The adapter (actors/actor.go) turns each actor message into an Event and
// performs the Effects, off the mailbox for anything that blocks.
//
// An activation's life, in short: it starts Idle; a wake starts an attempt
// (Running); the attempt's outcome parks the run (Parked: nothing in hand
// but an armed deadline), backs it off (BackingOff: a retry timer),
// writes the end of a failed run (Ending) or ends the activation (Done). A
// wake that arrives during an attempt is owed: it is never dropped, and
// starts the next attempt as soon as this one parks. docs/run-lifecycle.md
// draws the whole table (Table).
package lifecycle

import (
	"fmt"
	"time"
)

// State is where an activation stands.
type State uint8

const (
	// Idle: no attempt, no timer, nothing owed. A fresh activation, or one
	// whose attempt stopped at a drain.
	Idle State = iota
	// Running: one attempt is in flight.
	Running
	// Parked: the run waits (children, a deadline); its deadline is armed
	// and a store handle may be kept for the next attempt.
	Parked
	// BackingOff: an attempt failed and a retry timer is armed.
	BackingOff
	// Ending: the end of a failed run is being written.
	Ending
	// Done: the activation is over (the run ended here, moved away, was
	// cancelled or passivated); nothing starts again.
	Done
)

var stateNames = [...]string{"idle", "running", "parked", "backing-off", "ending", "done"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// Reason says why a run is woken. The numbers are those of
// actorspb.WakeReason on the wire (a test checks they match).
type Reason int32

const (
	ReasonUnspecified Reason = iota
	// ReasonStarted: the API or a parent created the run.
	ReasonStarted
	// ReasonChildFinished: a child completed, failed or was cancelled.
	ReasonChildFinished
	// ReasonDeadline: the deadline of the wait it parked on passed.
	ReasonDeadline
	// ReasonRecovered: a sweep found it with no live owner (a node died or
	// restarted, or its wake was lost); the attempt gets a recovery notice.
	ReasonRecovered
	// ReasonMoved: a topology change moved it here from a member that had
	// work in hand for it.
	ReasonMoved
	// ReasonRetry: its retry timer fired.
	ReasonRetry
	// ReasonWokenWhileRunning: a wake arrived during its last attempt.
	ReasonWokenWhileRunning
	// ReasonReopen: an attempt from a kept store handle was fenced out; the
	// next opens the run afresh.
	ReasonReopen
	// ReasonUpgraded: its last attempt stopped at a model boundary to take
	// the definition version an operator moved it to (Upgrading).
	ReasonUpgraded
)

var reasonNames = [...]string{"unspecified", "started", "child-finished", "deadline", "recovered", "moved", "retry", "woken-while-running", "reopen", "upgraded"}

func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", int32(r))
}

// Reasons lists every reason, in wire order.
func Reasons() []Reason {
	out := make([]Reason, len(reasonNames))
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// ParseReason is the inverse of Reason.String.
func ParseReason(s string) (Reason, error) {
	for i, n := range reasonNames {
		if n == s {
			return Reason(i), nil
		}
	}
	return 0, fmt.Errorf("lifecycle: unknown wake reason %q", s)
}

// Outcome classifies how an attempt ended. The adapter maps the attempt's
// error to one (actors/outcome.go).
type Outcome uint8

const (
	// Completed: the run's last commit completed it.
	Completed Outcome = iota
	// Waiting: the run parked (its children, a deadline).
	Waiting
	// Drained: the node is closing; the attempt stopped at a commit
	// boundary and the next owner resumes the run.
	Drained
	// Ended: the run had already ended (completed, cancelled, failed
	// elsewhere), or has no record to attempt: nothing to do.
	Ended
	// FencedOut: another writer holds the run or it was cancelled (lease
	// lost, revision conflict, session busy).
	FencedOut
	// Transient: a failure a retry may fix; counted against MaxRetries.
	Transient
	// Unavailable: the log could not be reached or could not store (NATS
	// down, no leader, a full disk). Retried for as long as it lasts and
	// never counted against MaxRetries: an outage is not the run's fault.
	Unavailable
	// NotYetCreated: the run is in the active set but its record is not
	// in the log yet (its creator may still be writing it). Retried like
	// an outage; the attempt itself gives up on an entry that is too old.
	NotYetCreated
	// Permanent: no retry can fix it (budget, input, contract).
	Permanent
	// Unreadable: the run's log holds an event of a schema version newer
	// than this build reads (a node rolled back past the build that wrote
	// it). Neither failed nor retried: the run parks, and a node of a
	// build that reads it resumes it (its start's sweep, a later wake).
	Unreadable
	// Upgrading: the run reached a model boundary with an upgrade to
	// another definition version pending; the attempt stopped there,
	// committing nothing, so that the next one takes the new version.
	// Attempted again at once; neither a failure nor an outage.
	Upgrading
)

var outcomeNames = [...]string{"completed", "waiting", "drained", "ended", "fenced-out", "transient", "unavailable", "not-yet-created", "permanent", "unreadable", "upgrading"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", o)
}

// ParseOutcome is the inverse of Outcome.String.
func ParseOutcome(s string) (Outcome, error) {
	for i, n := range outcomeNames {
		if n == s {
			return Outcome(i), nil
		}
	}
	return 0, fmt.Errorf("lifecycle: unknown outcome %q", s)
}

// Event is something that happened to an activation.
type Event interface{ event() }

type (
	// Woken: a wake message (started, child finished, deadline, recovered,
	// moved).
	Woken struct{ Reason Reason }
	// RetryFired: the retry timer armed by ArmRetry fired.
	RetryFired struct{}
	// AttemptEnded: the attempt started by StartAttempt ended.
	AttemptEnded struct {
		Outcome Outcome
		// Err is the attempt's error, for WriteEnd and logs.
		Err string
		// Reused: the attempt started from the kept store handle.
		Reused bool
		// Keepable: the attempt's store handle is small enough to keep
		// while parked (Waiting only).
		Keepable bool
		// WaitCallID names the wait the run parked on (Waiting only).
		WaitCallID string
	}
	// CancelRequested: the run was cancelled (a Stop message).
	CancelRequested struct{}
	// MovedAway: the actor is being stopped from outside, by a topology
	// change that placed the run on another member.
	MovedAway struct{}
	// Drain: the node is closing; no attempt starts from now on.
	Drain struct{}
	// IdleTimeout: the actor's receive timeout fired.
	IdleTimeout struct{}
	// EndWritten: the end requested by WriteEnd is in the log (or the
	// member stopped trying).
	EndWritten struct{}
)

func (Woken) event()           {}
func (RetryFired) event()      {}
func (AttemptEnded) event()    {}
func (CancelRequested) event() {}
func (MovedAway) event()       {}
func (Drain) event()           {}
func (IdleTimeout) event()     {}
func (EndWritten) event()      {}

// Effect is something the adapter must do, in the order given.
type Effect interface{ effect() }

type (
	// StartAttempt: start an attempt off the mailbox; its end comes back
	// as AttemptEnded. Reuse: from the kept store handle.
	StartAttempt struct {
		Reason Reason
		Reuse  bool
	}
	// CancelAttempt: cancel the attempt in flight (its context).
	CancelAttempt struct{}
	// ArmRetry: fire RetryFired at At (replacing any armed retry).
	ArmRetry struct{ At time.Time }
	// DisarmRetry: the armed retry timer must not fire.
	DisarmRetry struct{}
	// ArmDeadline: read the deadline of the wait the run parked on (and
	// its root's wall-clock deadline) off the mailbox and wake the run
	// then.
	ArmDeadline struct{ WaitCallID string }
	// KeepHandle: keep the attempt's store handle for the next attempt.
	KeepHandle struct{}
	// DropHandle: drop the kept store handle.
	DropHandle struct{}
	// WriteEnd: write the end of the failed run off the mailbox, retrying
	// until it is written; then EndWritten.
	WriteEnd struct{ Reason string }
	// HandOver: wake the run on its new owner (the activation had work in
	// hand when it moved away).
	HandOver struct{ Reason Reason }
	// Passivate: stop the actor; the run's state is in the log.
	Passivate struct{}
	// RearmIdle: arm the actor's receive timeout again (protoactor-go
	// disarms it when it fires).
	RearmIdle struct{}
)

func (StartAttempt) effect()  {}
func (CancelAttempt) effect() {}
func (ArmRetry) effect()      {}
func (DisarmRetry) effect()   {}
func (ArmDeadline) effect()   {}
func (KeepHandle) effect()    {}
func (DropHandle) effect()    {}
func (WriteEnd) effect()      {}
func (HandOver) effect()      {}
func (Passivate) effect()     {}
func (RearmIdle) effect()     {}

// Config tunes a Run.
type Config struct {
	// MaxRetries of Transient outcomes in a row before the run fails;
	// zero means 5.
	MaxRetries int
	// RetryBase is the first retry's delay, doubled at each retry up to
	// RetryMax; zero means 200ms (and RetryMax 10s).
	RetryBase, RetryMax time.Duration
}

// Run is one activation of a run. Its zero value is not usable: New.
type Run struct {
	cfg   Config
	state State
	// pending: a wake arrived during the attempt in flight.
	pending bool
	// stopped: the run was cancelled; the attempt in flight ends it.
	stopped bool
	// draining: the node is closing; nothing starts.
	draining bool
	// kept: a store handle is kept for the next attempt.
	kept bool
	// retries counts Transient outcomes in a row; outages Unavailable and
	// NotYetCreated ones (for their backoff only).
	retries, outages int
}

// New returns an Idle activation.
func New(cfg Config) *Run {
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 5
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 200 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 10 * time.Second
	}
	return &Run{cfg: cfg}
}

// State is the activation's state.
func (r *Run) State() State { return r.state }

// Pending reports whether a wake is owed to the attempt in flight.
func (r *Run) Pending() bool { return r.pending }

// Kept reports whether a store handle is kept.
func (r *Run) Kept() bool { return r.kept }

// Draining reports whether the node is closing.
func (r *Run) Draining() bool { return r.draining }

// Retries is the number of Transient outcomes in a row.
func (r *Run) Retries() int { return r.retries }

// Step applies ev at now and returns the effects to perform, in order.
func (r *Run) Step(now time.Time, ev Event) []Effect {
	if r.state == Done {
		return nil // nothing happens after the end
	}
	switch e := ev.(type) {
	case Woken:
		return r.woken(e.Reason)
	case RetryFired:
		if r.state != BackingOff {
			return nil // a timer that lost its race with a wake or a stop
		}
		return r.start(ReasonRetry)
	case AttemptEnded:
		if r.state != Running {
			return nil // not ours: only StartAttempt's attempt reports
		}
		return r.ended(now, e)
	case CancelRequested:
		return r.cancel()
	case MovedAway:
		return r.movedAway()
	case Drain:
		return r.drain()
	case IdleTimeout:
		switch r.state {
		case Idle, Parked:
			return r.finish(Passivate{})
		default: // work in hand: stay, and watch for idleness again
			return []Effect{RearmIdle{}}
		}
	case EndWritten:
		if r.state != Ending {
			return nil
		}
		return r.finish(Passivate{})
	}
	return nil
}

func (r *Run) woken(reason Reason) []Effect {
	switch r.state {
	case Running:
		if !r.draining {
			r.pending = true
		}
		return nil
	case Ending:
		return nil // the run failed; its end is being written
	}
	if r.draining {
		return nil // the next owner resumes it
	}
	var effs []Effect
	if r.state == BackingOff {
		effs = append(effs, DisarmRetry{})
	}
	return append(effs, r.start(reason)...)
}

// start starts an attempt, from the kept handle if there is one.
func (r *Run) start(reason Reason) []Effect {
	if r.draining {
		r.state = Idle
		return nil
	}
	reuse := r.kept
	r.kept, r.pending, r.state = false, false, Running
	return []Effect{StartAttempt{Reason: reason, Reuse: reuse}}
}

func (r *Run) ended(now time.Time, e AttemptEnded) []Effect {
	pending := r.pending
	r.pending = false
	if r.stopped && e.Outcome != Completed {
		return r.finish(Passivate{})
	}
	switch e.Outcome {
	case Completed, Ended:
		// The completion consumer tells the parent and the waiters.
		return r.finish(Passivate{})
	case Waiting:
		r.retries, r.outages = 0, 0
		var effs []Effect
		if e.Keepable {
			r.kept = true
			effs = append(effs, KeepHandle{})
		}
		if r.draining {
			r.state = Parked
			return effs
		}
		if pending {
			// The wake came while the attempt ran: the attempt may have
			// read the run's state before what the wake announces. Never
			// drop it.
			return append(effs, r.start(ReasonWokenWhileRunning)...)
		}
		r.state = Parked
		return append(effs, ArmDeadline{WaitCallID: e.WaitCallID})
	case Drained:
		r.draining, r.state = true, Idle
		return nil
	case Unreadable:
		// No retry reads it better, and a wake that came meanwhile is
		// moot: this build cannot move the run. Parked without a
		// deadline; a wake attempts it again (and parks it again).
		r.retries, r.outages = 0, 0
		r.state = Parked
		return nil
	case FencedOut:
		if e.Reused {
			// Someone wrote to the session since the kept handle's last
			// commit (another member's activation, a cancellation): what a
			// fresh activation would do with this wake is decided by one.
			return r.start(ReasonReopen)
		}
		// Another owner holds the run, or it was cancelled: the log
		// decides, and this activation ends. A wake that came during the
		// attempt goes on to the run's owner: the other writer may have
		// read the run's state before what the wake announces (a child
		// finished after its read, and the completion came here, to this
		// member's idea of the owner). Without it, that writer parks on a
		// stale read and nothing wakes it again. The wake that started
		// this attempt needs no such care: the other writer took the
		// lease after this attempt did, and read after it.
		if pending && !r.stopped {
			return r.finish(HandOver{Reason: ReasonWokenWhileRunning}, Passivate{})
		}
		return r.finish(Passivate{})
	case Upgrading:
		// A wake owed meanwhile is served by this attempt as well: it
		// reads the run's state afresh.
		r.retries, r.outages = 0, 0
		return r.start(ReasonUpgraded)
	case Unavailable, NotYetCreated:
		r.outages++
		return r.backOff(now, r.outages)
	case Transient:
		if r.retries >= r.cfg.MaxRetries {
			return r.fail(e.Err)
		}
		r.retries++
		return r.backOff(now, r.retries)
	default: // Permanent, or an outcome this core does not know
		return r.fail(e.Err)
	}
}

func (r *Run) backOff(now time.Time, n int) []Effect {
	if r.draining {
		r.state = Idle
		return nil
	}
	d := r.cfg.RetryBase
	for i := 1; i < n && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	r.state = BackingOff
	return []Effect{ArmRetry{At: now.Add(min(d, r.cfg.RetryMax))}}
}

func (r *Run) fail(reason string) []Effect {
	r.state = Ending
	return []Effect{WriteEnd{Reason: reason}}
}

func (r *Run) cancel() []Effect {
	r.stopped = true
	switch r.state {
	case Running:
		return []Effect{CancelAttempt{}}
	case BackingOff:
		return r.finish(DisarmRetry{}, Passivate{})
	case Ending:
		return nil
	default: // Idle, Parked
		return r.finish(Passivate{})
	}
}

func (r *Run) movedAway() []Effect {
	switch r.state {
	case Running:
		// Work in hand moves with the run: the new owner activates it and
		// takes its lease (fencing this attempt out, if it goes on).
		effs := []Effect{CancelAttempt{}}
		if !r.stopped && !r.draining {
			effs = append(effs, HandOver{Reason: ReasonMoved})
		}
		return r.finish(effs...)
	case BackingOff:
		effs := []Effect{DisarmRetry{}}
		if !r.stopped && !r.draining {
			effs = append(effs, HandOver{Reason: ReasonMoved})
		}
		return r.finish(effs...)
	default:
		// Parked: its deadline is the node's and its completions go to the
		// new owner, which activates it then. Ending: the end is being
		// written by this member regardless.
		return r.finish()
	}
}

func (r *Run) drain() []Effect {
	r.draining = true
	r.pending = false
	if r.state == BackingOff {
		r.state = Idle
		return []Effect{DisarmRetry{}}
	}
	return nil
}

// finish ends the activation after effs; a kept handle is dropped first.
func (r *Run) finish(effs ...Effect) []Effect {
	out := make([]Effect, 0, len(effs)+1)
	if r.kept {
		r.kept = false
		out = append(out, DropHandle{})
	}
	r.state = Done
	return append(out, effs...)
}
