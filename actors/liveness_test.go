package actors_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// Issue 22: a start whose record's write reported a failure although the
// record landed (a publish buffered across a reconnect and flushed later; a
// lost acknowledgement that could not be settled) told the client it
// failed and never woke the run: on a node alone, where no periodic sweep
// comes, the run stayed "running" for good. Now such a run is woken all
// the same, and its attempt runs it.
func TestStartWhoseCreationSeemedToFailStillRuns(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	var failed atomic.Bool
	n := admissionNode(t, nc, nil, nil, actors.Hooks{
		Created: func(_, _ string) error {
			if failed.CompareAndSwap(false, true) {
				return errors.New("test: the acknowledgement was lost and could not be settled")
			}
			return nil
		},
		// No sweep reads the active set: on a node alone the first sweep
		// may come after the start and wake the run, which is not what
		// this test is about.
		Sweep: func(bool, bool) error { return errors.New("test: no sweep") },
	})
	_, err := n.StartRun(context.Background(), actors.StartRequest{Owner: "alice", Agent: "a", Message: "Answer.", IdempotencyKey: "k1"})
	if err == nil {
		t.Fatal("the start succeeded; the hook should have failed it")
	}
	sess, run := actors.KeyedIDs("alice", "k1")
	finished(t, n, sess, run)
}

// Issue 22: a member's sweep that failed was not tried again: on a node
// alone (no sweep ticker) the first sweep after a restart is the only one,
// and every run of the node's previous incarnation waited on it. Now a
// failed sweep is tried again, as the same kind (first), with backoff on
// the node's clock.
func TestFailedFirstSweepIsTriedAgain(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	clk := clock.NewFake(time.Now())
	sweeps := make(chan bool, 16) // each sweep's "first"
	var calls atomic.Int32
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{calls: new(atomic.Int64)}, clock: clk, hooks: actors.Hooks{Sweep: func(first, _ bool) error {
		sweeps <- first
		if calls.Add(1) == 1 {
			return errors.New("test: the active set could not be read")
		}
		return nil
	}}}
	n := h.start(t)
	defer closeNode(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wait := func() bool {
		select {
		case first := <-sweeps:
			return first
		case <-ctx.Done():
			t.Fatal("no sweep came")
			return false
		}
	}
	if !wait() {
		t.Fatal("the node's first sweep was not a first sweep")
	}
	// The retry is a timer on the node's clock: wait until it is armed,
	// then move the clock past the longest backoff.
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("no retry armed after the failed sweep: %v", err)
	}
	clk.Advance(time.Minute)
	if !wait() {
		t.Fatal("the retried sweep was not a first sweep: runs without a lease would be left asleep")
	}
}
