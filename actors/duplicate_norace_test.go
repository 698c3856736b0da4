//go:build !race

package actors_test

import (
	"context"
	"testing"

	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// Two nodes live at once in one process: protoactor-go's remote.Start
// sets grpc's global logger (grpclog.SetLoggerV2) while the first node's
// grpc Server.Serve reads it, both sides inside protoactor-go and grpc
// (seen in fresh-clone-check on a loaded machine, session 12). A node
// process runs one member at a time; this test alone needs two, so it
// runs without -race (.ci/run runs it so), like the cluster package.

// D2: two nodes activate the same runs (a duplicate activation): the
// lease fencing decides who commits, the loser stops, and every run
// completes once.
func TestDuplicateActivation(t *testing.T) {
	g := &gate{}
	nc := natstest.Connect(t, natstest.Server(t))
	p := &parked{}
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{g: g}, sink: p.sink}
	n1 := h.start(t)
	defer closeNode(t, n1)
	sess, run, err := n1.Run(context.Background(), "planner", "Twice.")
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, p, run)
	n2 := h.start(t) // its recovery activates the parent and the children again
	defer closeNode(t, n2)
	for _, k := range []string{"1", "2", "3"} {
		g.release(`{"n":` + k + `}`)
	}
	result(t, n2, sess, run)
	msgs := history(t, nc, sess, run)
	completedAll(t, msgs)
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.ID] {
			t.Fatalf("message %s twice", m.ID)
		}
		seen[m.ID] = true
	}
}
