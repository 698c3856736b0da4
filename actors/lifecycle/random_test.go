package lifecycle_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/actors/lifecycle"
)

var seedFlag = flag.Uint64("seed", 0, "lifecycle: the seed of TestRandomSequences (0: a new one, printed)")

// TestRandomSequences drives the core with random event sequences, as the
// adapter could deliver them (an attempt's end only while one is in
// flight; timers that fire late; wakes, cancels, drains and moves at any
// time), and checks the invariants after every step. The seed is printed;
// -seed N replays it.
func TestRandomSequences(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (go test ./actors/lifecycle -run TestRandomSequences -seed %d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const sequences, steps = 3000, 60
	for i := range sequences {
		w := &world{run: lifecycle.New(lifecycle.Config{MaxRetries: 1 + rng.IntN(4)}), now: time.Unix(0, 0)}
		for j := range steps {
			ev := w.randomEvent(rng)
			if err := w.step(ev); err != nil {
				t.Fatalf("seed %d, sequence %d, step %d: %v\nhistory:\n%s", seed, i, j, err, strings.Join(w.history, "\n"))
			}
		}
	}
}

// world is what the adapter would hold around one activation: the attempt
// in flight, the retry timer, the kept handle, the end being written.
type world struct {
	run     *lifecycle.Run
	now     time.Time
	history []string

	inFlight, retryArmed, kept, writingEnd, passivated, handedOver bool
	deadlineArmed                                                  bool
	// owed: a wake arrived that no attempt started after it has served.
	owed, stopped, draining, ended bool
	lastReuse                      bool
}

func (w *world) randomEvent(rng *rand.Rand) lifecycle.Event {
	for {
		switch rng.IntN(10) {
		case 0, 1, 2:
			return lifecycle.Woken{Reason: lifecycle.Reasons()[1+rng.IntN(len(lifecycle.Reasons())-1)]}
		case 3, 4, 5:
			if !w.inFlight {
				continue // only an attempt in flight reports its end
			}
			return lifecycle.AttemptEnded{
				Outcome: lifecycle.Outcome(rng.IntN(int(lifecycle.Permanent) + 1)), Reused: w.lastReuse && rng.IntN(2) == 0,
				Keepable: rng.IntN(2) == 0, WaitCallID: fmt.Sprintf("call-%d", rng.IntN(3)), Err: "e",
			}
		case 6:
			return lifecycle.RetryFired{} // possibly late: a timer that lost its race
		case 7:
			switch rng.IntN(3) {
			case 0:
				return lifecycle.CancelRequested{}
			case 1:
				return lifecycle.MovedAway{}
			default:
				if rng.IntN(4) == 0 {
					return lifecycle.Drain{}
				}
				continue
			}
		case 8:
			return lifecycle.IdleTimeout{}
		case 9:
			if !w.writingEnd {
				continue
			}
			return lifecycle.EndWritten{}
		}
	}
}

func (w *world) step(ev lifecycle.Event) error {
	before := w.run.State()
	w.now = w.now.Add(time.Second)
	switch e := ev.(type) {
	case lifecycle.Woken:
		if before != lifecycle.Done && before != lifecycle.Ending && !w.draining && !w.stopped {
			w.owed = true
		}
	case lifecycle.AttemptEnded:
		w.inFlight = false
		if e.Outcome == lifecycle.Completed || e.Outcome == lifecycle.Ended {
			w.ended = true
		}
		if e.Outcome == lifecycle.Drained {
			w.draining = true
		}
		switch e.Outcome {
		case lifecycle.Completed, lifecycle.Ended, lifecycle.Drained, lifecycle.Permanent:
			w.owed = false // the run ended or failed, or the node drains: the log decides
		}
	case lifecycle.RetryFired:
		w.retryArmed = false
	case lifecycle.CancelRequested:
		w.stopped, w.owed = true, false
	case lifecycle.Drain:
		w.draining, w.owed = true, false
	case lifecycle.EndWritten:
		w.writingEnd = false
	}
	effs := w.run.Step(w.now, ev)
	after := w.run.State()
	w.history = append(w.history, fmt.Sprintf("%s: %v -> %s %v", before, ev, after, effs))
	if before == lifecycle.Done && len(effs) > 0 {
		return fmt.Errorf("effects after done: %v", effs)
	}
	for _, eff := range effs {
		switch e := eff.(type) {
		case lifecycle.StartAttempt:
			switch {
			case w.inFlight:
				return fmt.Errorf("two attempts at once")
			case w.ended:
				return fmt.Errorf("an attempt of a run whose end the log holds")
			case w.draining:
				return fmt.Errorf("an attempt after a drain")
			case w.stopped:
				return fmt.Errorf("an attempt after a cancel")
			case e.Reuse && !w.kept:
				return fmt.Errorf("an attempt from a handle that is not kept")
			}
			w.inFlight, w.owed, w.lastReuse = true, false, e.Reuse
			w.kept, w.deadlineArmed = false, false
		case lifecycle.CancelAttempt:
			if !w.inFlight {
				return fmt.Errorf("cancel with no attempt in flight")
			}
		case lifecycle.ArmRetry:
			if w.retryArmed {
				return fmt.Errorf("a second retry timer")
			}
			if !e.At.After(w.now) {
				return fmt.Errorf("a retry at %v, not after now %v", e.At, w.now)
			}
			w.retryArmed = true
		case lifecycle.DisarmRetry:
			if !w.retryArmed {
				// A timer that fired and lost its race is disarmed by the
				// world already; the core disarms only what it armed.
				return fmt.Errorf("disarm with no retry armed")
			}
			w.retryArmed = false
		case lifecycle.KeepHandle:
			if w.kept {
				return fmt.Errorf("keep a handle twice")
			}
			w.kept = true
		case lifecycle.DropHandle:
			if !w.kept {
				return fmt.Errorf("drop a handle not kept")
			}
			w.kept = false
		case lifecycle.ArmDeadline:
			w.deadlineArmed = true
		case lifecycle.WriteEnd:
			if w.writingEnd || w.ended {
				return fmt.Errorf("an end written twice")
			}
			w.writingEnd, w.owed = true, false // the run fails: its end answers every wake
		case lifecycle.HandOver:
			if w.stopped || w.draining {
				return fmt.Errorf("a hand-over of a cancelled or drained run")
			}
			w.handedOver, w.owed = true, false
		case lifecycle.Passivate:
			w.passivated = true
		}
	}
	if after == lifecycle.Done {
		// The actor stops: an attempt in flight must have been cancelled
		// in this step (its report goes nowhere), and an end being
		// written goes on without it (the member writes it).
		if w.inFlight {
			cancelled := false
			for _, eff := range effs {
				_, ok := eff.(lifecycle.CancelAttempt)
				cancelled = cancelled || ok
			}
			if !cancelled {
				return fmt.Errorf("done with an attempt in flight not cancelled")
			}
			w.inFlight = false
		}
		w.writingEnd = false
	}
	// Each state holds what it says, and only that.
	checks := []struct {
		ok   bool
		what string
	}{
		{(after == lifecycle.Running) == w.inFlight, "running iff an attempt is in flight"},
		{(after == lifecycle.BackingOff) == w.retryArmed, "backing-off iff a retry is armed"},
		{(after == lifecycle.Ending) == w.writingEnd, "ending iff an end is being written"},
		{w.run.Kept() == w.kept, "the core's kept handle is the world's"},
		{after != lifecycle.Parked || w.deadlineArmed || w.draining, "parked with its deadline armed"},
		{after != lifecycle.Done || !w.kept, "done with no handle kept"},
		{!w.passivated || after == lifecycle.Done, "passivated only when done"},
		// A wake that is owed always has an attempt or a retry in hand,
		// unless the run is ending or left this member.
		// A hand-over passes it on.
		{!w.owed || w.inFlight || w.retryArmed || after == lifecycle.Ending, "a wake owed with nothing in hand"},
	}
	for _, c := range checks {
		if !c.ok {
			return fmt.Errorf("invariant broken: %s (state %s)", c.what, after)
		}
	}
	return nil
}
