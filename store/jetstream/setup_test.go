package jetstream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// losingJS is a JetStream whose first stream look-up is never answered,
// as a request sent while the cluster had no leader.
type losingJS struct {
	njs.JetStream
	lookups atomic.Int32
}

func (l *losingJS) Stream(ctx context.Context, name string) (njs.Stream, error) {
	if l.lookups.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return l.JetStream.Stream(ctx, name)
}

// A set-up request that is never answered is sent again within a try
// (setupTry), not waited for to its caller's deadline: a member rejoining
// after an outage waited 20 s for a look-up of the log's stream sent while
// the cluster had no leader, long after it had recovered. Here the
// caller's deadline is 15 s and the first look-up is lost: before, the
// stream was never found.
func TestSetupSendsALostRequestAgain(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	newStore(t, nc, jetstream.Config{}) // the stream exists
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lossy := &losingJS{JetStream: js}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := jetstream.EnsureStream(ctx, lossy, jetstream.Config{}); err != nil {
		t.Fatalf("the stream after a lost look-up: %v", err)
	}
	if n := lossy.lookups.Load(); n != 2 {
		t.Fatalf("%d look-ups, want 2: the lost one and its retry", n)
	}
}

// Setup gives up on an error no retry fixes, and when its context ends.
func TestSetupStops(t *testing.T) {
	calls := 0
	bad := errors.New("stream name already in use with a different configuration")
	if err := jetstream.Setup(context.Background(), func(context.Context) error { calls++; return bad }); !errors.Is(err, bad) || calls != 1 {
		t.Fatalf("Setup = %v after %d calls, want the error after 1", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err := jetstream.Setup(ctx, func(context.Context) error {
		calls++
		if calls == 3 {
			cancel()
		}
		return context.DeadlineExceeded // a lost request
	})
	if !errors.Is(err, context.DeadlineExceeded) || calls != 3 {
		t.Fatalf("Setup = %v after %d calls, want the last error once its context ended at the third", err, calls)
	}
}

// A server without JetStream is answered at once, not waited out.
func TestSetupStopsWithoutJetStream(t *testing.T) {
	calls := 0
	err := jetstream.Setup(context.Background(), func(context.Context) error { calls++; return njs.ErrJetStreamNotEnabled })
	if !errors.Is(err, njs.ErrJetStreamNotEnabled) || calls != 1 {
		t.Fatalf("Setup = %v after %d calls, want JetStream not enabled after 1", err, calls)
	}
}
