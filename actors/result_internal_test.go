package actors

import (
	"context"
	"testing"

	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// Issue 27: Result added a watcher on every loop that only notify (on the
// member that consumed the run's completion) removed: a caller whose
// context ended, or whose run completed on another member, left its
// watchers behind for good. Result removes its own on every exit.
func TestResultLeavesNoWatcher(t *testing.T) {
	n := startInternal(t, natstest.Connect(t, natstest.Server(t)), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the caller went away
	if _, _, err := n.Result(ctx, "s0123456789", "r0123456789"); err == nil {
		t.Fatal("Result with an ended context returned no error")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.watchers) != 0 {
		t.Fatalf("Result left %d watchers behind: %v", len(n.watchers), n.watchers)
	}
}
