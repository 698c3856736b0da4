package jetstream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/store/storetest"
)

// sessionScoped gives each opener its own sessions on a shared stream, so
// many hosts share one server and still start from empty state.
type sessionScoped struct {
	s      *jetstream.Store
	prefix string
}

func (o sessionScoped) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	return o.s.Open(ctx, o.prefix+sessionID, runID)
}

// shared returns a newOpener over one server and store for the whole test.
func shared(t *testing.T, cfg jetstream.Config) func(*testing.T) storetest.Opener {
	nc := natstest.Connect(t, natstest.Server(t))
	s, err := jetstream.New(context.Background(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	return func(*testing.T) storetest.Opener {
		return sessionScoped{s: s, prefix: fmt.Sprintf("t%d-", n.Add(1))}
	}
}

// TestCrashMatrix runs the run loop's crash matrix on the JetStream store.
func TestCrashMatrix(t *testing.T) {
	runtimetest.CrashMatrix(t, shared(t, jetstream.Config{}), runtimetest.Scenarios())
}
