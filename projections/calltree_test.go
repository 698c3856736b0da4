package projections_test

import (
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// A run that ended (cancelled, failed) leaves no call open in its tree: the
// one being dispatched reads unknown, the ones not dispatched skipped,
// each saying why. Before, a cancelled run's call read "dispatching" for
// ever.
func TestCallTreeClosesTheCallsOfAnEndedRun(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	must := func(e events.Envelope, err error) events.Envelope {
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	cp := runtime.Checkpoint{Revision: 2, Step: 1, Phase: runtime.PhaseCalls, ResponseID: "m2",
		Append: []model.Message{{ID: "m2", Role: model.RoleAssistant, Parts: []model.Part{model.Call("c1", "run_js", "{}"), model.Call("c2", "run_js", "{}")}}},
		Calls:  []runtime.CallRecord{{ID: "c1", Name: "run_js", Args: "{}", State: runtime.CallDispatching}, {ID: "c2", Name: "run_js", Args: "{}", State: runtime.CallPending}}}
	log := []projections.Event{
		{Seq: 1, Subject: events.RunCreatedSubject("s1", "r1"), Envelope: must(events.New(events.RunCreated, "s1", "r1", 0, 0, at, events.Run{RunID: "r1", SessionID: "s1", Agent: "a", RootRunID: "r1"}))},
		{Seq: 2, Subject: events.CheckpointSubject("s1", "r1", false), Envelope: must(events.New(events.CheckpointCommitted, "s1", "r1", 2, 1, at, events.Checkpoint{Checkpoint: cp}))},
		{Seq: 3, Subject: events.RunEndedSubject("s1", "r1"), Envelope: must(events.New(events.RunEnded, "s1", "r1", 0, 0, at, events.Ended{Status: "cancelled", Reason: "by its owner"}))},
	}
	tree := projections.NewCallTree()
	for _, e := range log {
		if err := tree.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	n, ok := tree.Tree("r1")
	if !ok || n.Status != runtime.StatusCancelled || len(n.Calls) != 2 {
		t.Fatalf("tree %+v", n)
	}
	if c := n.Calls[0]; c.State != runtime.CallUnknown || c.Result != "the run cancelled while it was dispatching: its effect is unknown" {
		t.Fatalf("the dispatching call: %+v", c)
	}
	if c := n.Calls[1]; c.State != runtime.CallSkipped || c.Result != "the run cancelled before it was dispatched" {
		t.Fatalf("the pending call: %+v", c)
	}
}
