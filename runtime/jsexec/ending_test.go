package jsexec

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// Once Execute has begun to end, a callback the script starts (an
// abandoned realm's script goes on after Execute) starts nothing with a
// live context: a capability must not take effect after the script's time
// is over. Execute's end cancels the callbacks and refuses new ones before
// it refuses their results; in the other order, a callback started between
// the two ran its capability with a live context.
func TestNoCallbackStartsLiveAtExecutesEnd(t *testing.T) {
	invoked := make(chan error, 1)
	invoke := func(ctx context.Context, _ string, _ int, _ string, _ json.RawMessage) (jstool.Value, error) {
		invoked <- ctx.Err()
		return jstool.Value{JSON: json.RawMessage(`1`)}, nil
	}
	f := newTestFactory(t, ModeInProcess, Limits{})
	ex, err := f.NewExecutor(context.Background(), jstool.Config{
		Capabilities: []jstool.CapabilityInfo{{Name: "kv.get", InputSchema: json.RawMessage(`{}`)}}, Invoke: invoke,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()

	var dispatched error
	var ran bool
	var live bool
	testHookEnding = func(io runIO) {
		testHookEnding = nil
		dispatched = io.dispatch(1, "kv.get", json.RawMessage(`{}`))
		if dispatched != nil {
			return
		}
		// Started: wait for the capability to run, and see its context.
		// Generous: a loaded machine may take long to run a goroutine.
		select {
		case err := <-invoked:
			ran, live = true, err == nil
		case <-time.After(30 * time.Second):
		}
	}
	defer func() { testHookEnding = nil }()
	out, err := ex.Execute(context.Background(), jstool.Script{CallID: "c", Code: `return 1`})
	if err != nil || out.Failure != nil {
		t.Fatalf("Execute: %v, %+v", err, out.Failure)
	}
	if ran && live {
		t.Fatal("a callback started at Execute's end ran its capability with a live context")
	}
}
