package actors

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/internal/clock"
)

// progressMsg counts InProgress reports.
type progressMsg struct{ reports chan struct{} }

func (m progressMsg) InProgress() error {
	m.reports <- struct{}{}
	return nil
}

// A completion whose delivery to its parent is under way is reported in
// progress every inProgressEvery of the node's clock, so the consumer does
// not redeliver it after its AckWait; once delivered, never again.
func TestCompletionKeptInProgressWhileDelivered(t *testing.T) {
	c := clock.NewFake(time.Unix(1000, 0))
	msg := progressMsg{reports: make(chan struct{}, 10)}
	stop := keepInProgress(c, msg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c.Advance(inProgressEvery)
		select {
		case <-msg.reports:
		case <-ctx.Done():
			t.Fatalf("no report in progress after %v", time.Duration(i+1)*inProgressEvery)
		}
	}
	c.Advance(inProgressEvery - time.Nanosecond)
	stop()
	if c.Armed() != 0 {
		t.Fatalf("%d timers armed after stop", c.Armed())
	}
	c.Advance(10 * inProgressEvery)
	select {
	case <-msg.reports:
		t.Fatal("a report in progress after the delivery ended")
	default:
	}
	if inProgressEvery >= completionConsumerConfig().AckWait {
		t.Fatalf("inProgressEvery %v is not within the consumer's AckWait %v", inProgressEvery, completionConsumerConfig().AckWait)
	}
}
