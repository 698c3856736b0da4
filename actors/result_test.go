package actors_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// Result subscribes to a run's end subjects and reads the run's status
// from the stream each time a message comes. A plain subscription gets a
// JetStream publish as the server receives it, possibly before the stream
// stored it: the read that follows can still find the run active, and
// nothing else may come (the completion went to the member that consumed
// it). Result then waited out its one-minute safety net: in cluster's
// TestRunsSpreadAcrossMembers 1 run in 3 took 60s more to be seen ended.
// Now a message that the read does not confirm has Result read again
// soon. The message here is one the stream refuses (a wrong expected
// sequence, as a fenced-out writer's), so the read never confirms it.
func TestResultReadsAgainSoonAfterAnUnconfirmedEnd(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	held := newHeldChild()
	waits := make(chan time.Duration, 100)
	h := &harness{nc: nc, parent: held, child: childModel{}, hooks: actors.Hooks{
		ResultWaits: func(_ string, again time.Duration) { waits <- again },
	}}
	n := h.start(t)
	t.Cleanup(func() { closeNode(t, n) })
	sess, run, err := n.Run(context.Background(), "planner", "Hold on.")
	if err != nil {
		t.Fatal(err)
	}
	await(t, held.entered, 1, "the run's model called")
	type answer struct {
		st  runtime.CallStatus
		err error
	}
	done := make(chan answer, 1)
	go func() {
		st, _, err := n.Result(context.Background(), sess, run)
		done <- answer{st, err}
	}()
	if again := next(t, waits); again != time.Minute {
		t.Fatalf("first wait %v; want the one-minute safety net", again)
	}
	refused := &nats.Msg{Subject: events.RunEndedSubject(sess, run), Header: nats.Header{}, Data: []byte(`{}`)}
	refused.Header.Set("Nats-Expected-Last-Subject-Sequence", "999999999")
	if err := nc.PublishMsg(refused); err != nil {
		t.Fatal(err)
	}
	var soon []time.Duration
	for again := next(t, waits); again < time.Minute; again = next(t, waits) {
		soon = append(soon, again)
	}
	if len(soon) == 0 || soon[0] > 100*time.Millisecond {
		t.Fatalf("waits after an end the stream does not have: %v; want a short one first, backing off", soon)
	}
	for i := 1; i < len(soon); i++ {
		if soon[i] <= soon[i-1] || soon[i] > 5*time.Second {
			t.Fatalf("waits after an end the stream does not have: %v; want them growing, under 5s", soon)
		}
	}
	close(held.release)
	if a := <-done; a.err != nil || a.st != runtime.StatusCompleted {
		t.Fatalf("Result: %s, %v; want completed", a.st, a.err)
	}
}

// next receives the next of Result's waits, failing the test after a
// (generous) deadline.
func next(t *testing.T, waits <-chan time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-waits:
		return d
	case <-time.After(2 * time.Minute):
		t.Fatal("Result did not wait again within 2 minutes")
		return 0
	}
}
