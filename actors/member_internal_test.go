package actors

import (
	"testing"

	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// Issue 22 (found by test/chaos, three nodes, seed 333490186): a node
// closed while it was rejoining after an expulsion stopped the member being
// replaced a second time, and protoactor-go's ActorSystem.Shutdown
// panicked (close of a closed channel). A member stops once.
func TestMemberStopsOnce(t *testing.T) {
	n := startInternal(t, natstest.Connect(t, natstest.Server(t)), nil)
	m := n.current()
	m.stop(false) // rejoin's stop of the expelled member
	m.stop(true)  // Close's, before rejoin replaced it
}
