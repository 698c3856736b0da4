package actors

import (
	"testing"

	pcluster "github.com/asynkron/protoactor-go/cluster"

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

// A member alone shuts its protoactor-go cluster down without the graceful
// shutdown's 2 s pause (it has nobody to hand identities to): `node run`
// waited 2.0 s after its last line to exit, 0.07 s after this. A member of
// a cluster keeps protoactor-go's own shutdown, pause included.
func TestAloneMemberSkipsTheGracePause(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider pcluster.ClusterProvider
		graceful bool
		want     bool
	}{
		{"alone, graceful", soloProvider{}, true, true},
		{"alone, not graceful", soloProvider{}, false, false},
		{"in a cluster, graceful", clusterStub{}, true, false},
		{"in a cluster, not graceful", clusterStub{}, false, false},
	} {
		if got := withoutPause(tc.provider, tc.graceful); got != tc.want {
			t.Errorf("%s: without the pause %v, want %v", tc.name, got, tc.want)
		}
	}
}

// clusterStub is a membership provider that is not the solo one.
type clusterStub struct{ pcluster.ClusterProvider }
