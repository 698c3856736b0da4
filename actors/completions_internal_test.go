package actors

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// staleProvider is the membership of a member that is not current: its
// entry expired (a pause past the TTL) and it is rejoining.
type staleProvider struct{ soloProvider }

func (staleProvider) Fresh() bool { return false }

// completionMsg is a completion as the consumer hands it over; it reports
// how it was settled.
type completionMsg struct {
	jetstream.Msg
	subject string
	settled chan string
}

func (m completionMsg) Subject() string                  { return m.subject }
func (m completionMsg) InProgress() error                { return nil }
func (m completionMsg) Ack() error                       { m.settled <- "ack"; return nil }
func (m completionMsg) Term() error                      { m.settled <- "term"; return nil }
func (m completionMsg) NakWithDelay(time.Duration) error { m.settled <- "nak"; return nil }

// Issue 22 (seed 943673719, three nodes): a node whose member was expelled
// after a pause went on taking completions from the shared consumer while
// it rejoined, and held each one for its request's whole retry (15 s) before
// giving it back, again and again: parents woke 30-50 s after their last
// child, where another member could have told them at once. A member that
// is not current now gives a completion back at once; before, the delivery
// waited on the node's waits clock for the member to be current.
func TestCompletionNotHeldByAMemberThatIsNotCurrent(t *testing.T) {
	waits := clock.NewFake(time.Unix(1000, 0))
	n := startInternal(t, natstest.Connect(t, natstest.Server(t)), nil, func(c *Config) { c.Waits = waits })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, child := parentAndChild(ctx, t, n)
	armed := waits.Armed()
	m := n.current()
	n.mu.Lock()
	was := m.provider
	m.provider = staleProvider{}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		m.provider = was
		n.mu.Unlock()
	}()

	msg := completionMsg{subject: events.RunEndedSubject(child.SessionID, child.RunID), settled: make(chan string, 1)}
	done := make(chan struct{})
	go func() { defer close(done); n.finished(msg) }()
	waiting := make(chan error, 1)
	go func() { waiting <- waits.BlockUntil(ctx, armed+1) }()
	select {
	case how := <-msg.settled:
		if how != "nak" {
			t.Fatalf("the completion was settled with %s, want it given back (nak)", how)
		}
	case err := <-waiting:
		if err == nil {
			t.Fatal("a member that is not current waits to deliver the completion (on the waits clock) instead of giving it back")
		}
		t.Fatal(err)
	}
	<-done
}

// parentAndChild records a root run and a child of it (no attempt of
// either runs unless woken).
func parentAndChild(ctx context.Context, t *testing.T, n *Node) (parent, child events.Run) {
	t.Helper()
	parent = events.Run{RunID: "rparent", SessionID: "sparent", Agent: "solo", Message: "m", RootRunID: "rparent"}
	child = events.Run{RunID: "rchild", SessionID: "schild", Agent: "solo", Message: "m", RootRunID: "rparent",
		ParentRunID: "rparent", ParentSessionID: "sparent", ParentCallID: "call-1"}
	for _, r := range []events.Run{parent, child} {
		if _, err := n.runlog.createRun(ctx, r, 0); err != nil {
			t.Fatal(err)
		}
	}
	return parent, child
}
