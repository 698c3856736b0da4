package actors

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// holdModel holds the step of the run whose message is "hold" until
// release is closed (or its attempt is cancelled), saying when it has
// begun; any other run completes at once.
type holdModel struct {
	entered chan struct{}
	release chan struct{}
}

func (m holdModel) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	if req.Messages[0].Text() == "hold" {
		select {
		case m.entered <- struct{}{}:
		default:
		}
		select {
		case <-m.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r := model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`))
	return &r, nil
}

// A child's end that reaches its parent's activation while the node drains
// is dropped there (lifecycle: after a drain nothing starts and wakes are
// not owed), so it must not be acknowledged: the consumer would forget it,
// and the parent, parked on a read made before the child ended, is left to
// whichever sweep comes after this moment. A new owner's sweep on the
// topology change may already have run (a third member still routing to
// the draining one); when the owner also holds the lease, no periodic
// sweep wakes it again and the parent stays parked for good. The drain is
// held open by a run whose model step waits; the waits' clock is fake, so
// the drain's bound never ends it meanwhile.
func TestChildEndReachingADrainingParentIsGivenBack(t *testing.T) {
	waits := clock.NewFake(time.Unix(1000, 0))
	hold := holdModel{entered: make(chan struct{}, 1), release: make(chan struct{})}
	var attempted sync.Map // run ID -> reason, of every attempt that ran
	n := startInternal(t, natstest.Connect(t, natstest.Server(t)), nil, func(c *Config) {
		c.Waits = waits
		c.Model = func(Agent) (model.Model, error) { return hold, nil }
		c.OnAttempt = func(e AttemptEnded) { attempted.Store(e.Run.RunID, e.Reason) }
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	parent, child := parentAndChild(ctx, t, n)
	if _, _, err := n.Run(ctx, "solo", "hold"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.entered: // an attempt is in its model step: the drain waits for it
	case <-ctx.Done():
		t.Fatal("the holding run's model step never began")
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close(context.Background()) }()
	select {
	case <-n.drain: // Close has begun: the node drains
	case <-ctx.Done():
		t.Fatal("Close never began its drain")
	}

	msg := completionMsg{subject: events.RunEndedSubject(child.SessionID, child.RunID), settled: make(chan string, 1)}
	go n.finished(msg)
	var how string
	select {
	case how = <-msg.settled:
	case <-ctx.Done():
	}
	// The drain ends whatever the outcome, before any verdict.
	close(hold.release)
	if err := <-closed; err != nil {
		t.Errorf("close: %v", err)
	}
	_, parentAttempted := attempted.Load(parent.RunID)
	switch how {
	case "":
		t.Fatal("the child's end was never settled")
	case "ack":
		t.Fatalf("the child's end was acknowledged to the consumer while its parent's activation drained "+
			"(parent attempted: %v): the wake was dropped there, nothing redelivers it, and only a sweep "+
			"that comes after this moment wakes the parent", parentAttempted)
	}
	if parentAttempted {
		t.Fatal("the parent was attempted on a draining node")
	}
}

// A wake whose request gives up (its owner unreachable, or not current, for
// longer than the request's retries) is sent again later instead of being
// dropped: a run nothing else wakes (no topology change to come, so no
// sweep of every run) is attempted once the owner can be reached. Before,
// the wake was logged and dropped, and the run waited for good.
func TestWakeNotDeliveredIsSentAgain(t *testing.T) {
	waits := clock.NewFake(time.Unix(1000, 0))
	attempted := make(chan string, 16)
	n := startInternal(t, natstest.Connect(t, natstest.Server(t)), nil, func(c *Config) {
		c.Waits = waits
		c.OnAttempt = func(e AttemptEnded) { attempted <- e.Run.RunID }
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := events.Run{RunID: "rlone", SessionID: "slone", Agent: "solo", Message: "m", RootRunID: "rlone", Budget: &events.RunBudget{Steps: 10}}
	if _, err := n.runlog.createRun(ctx, run, 0); err != nil {
		t.Fatal(err)
	}
	m := n.current()
	n.mu.Lock()
	was := m.provider
	m.provider = staleProvider{}
	n.mu.Unlock()

	armed := waits.Armed()
	n.wake(run.SessionID, run.RunID, lifecycle.ReasonStarted)
	// The request waits for the member to be current, twelve times, on the
	// waits clock; then it gives up.
	for i := 0; i < 12; i++ {
		if err := waits.BlockUntil(ctx, armed+1); err != nil {
			t.Fatalf("try %d of the request never waited: %v", i+1, err)
		}
		waits.Advance(2 * time.Second)
	}
	if err := waits.BlockUntil(ctx, armed+1); err != nil {
		t.Fatalf("the wake was dropped when its request gave up (nothing is armed to send it again): %v", err)
	}
	n.mu.Lock()
	m.provider = was
	n.mu.Unlock()
	waits.Advance(wakeRetry)
	select {
	case id := <-attempted:
		if id != run.RunID {
			t.Fatalf("attempted %s, want %s", id, run.RunID)
		}
	case <-ctx.Done():
		t.Fatal("the wake sent again never reached the run")
	}
}
