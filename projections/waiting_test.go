package projections_test

import (
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// The run index shows a run waiting while its latest commit dispatches
// wait_calls, running again from its next commit, and its end after that;
// a commit that only mentions the tool (in its text, or a wait already
// done) is no wait. Before, a parked run read running.
func TestRunIndexShowsWaiting(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	ev, _ := sequencer(t)
	commit := func(rev int64, done bool, cp runtime.Checkpoint) projections.Event {
		cp.Revision = rev
		e, err := events.New(events.CheckpointCommitted, "s1", "r1", rev, 1, at, events.Checkpoint{Checkpoint: cp})
		return ev(events.CheckpointSubject("s1", "r1", done), e, err)
	}
	wait := runtime.CallRecord{ID: "w1", Name: runtime.ToolWait, Args: `{"call_ids":["c1"]}`, State: runtime.CallDispatching}
	spawned := runtime.CallRecord{ID: "c1", Name: "spawn_helper", Args: "{}", State: runtime.CallDone}
	created, err := events.New(events.RunCreated, "s1", "r1", 0, 0, at, events.Run{RunID: "r1", SessionID: "s1", Agent: "a", RootRunID: "r1"})
	steps := []struct {
		e    projections.Event
		want runtime.CallStatus
	}{
		{ev(events.RunCreatedSubject("s1", "r1"), created, err), runtime.StatusRunning},
		{commit(2, false, runtime.Checkpoint{Calls: []runtime.CallRecord{spawned, {ID: "w1", Name: runtime.ToolWait, State: runtime.CallPending}}}), runtime.StatusRunning},
		{commit(3, false, runtime.Checkpoint{Calls: []runtime.CallRecord{spawned, wait}}), runtime.StatusWaiting},
		{commit(4, false, runtime.Checkpoint{Calls: []runtime.CallRecord{spawned, {ID: "w1", Name: runtime.ToolWait, State: runtime.CallDone}}}), runtime.StatusRunning},
		{commit(5, false, runtime.Checkpoint{Append: []model.Message{model.TextMessage("m5", model.RoleAssistant, `I will call "wait_calls" later.`)}}), runtime.StatusRunning},
		{commit(6, false, runtime.Checkpoint{Calls: []runtime.CallRecord{wait}}), runtime.StatusWaiting},
		{commit(7, true, runtime.Checkpoint{Reply: &runtime.Reply{Type: runtime.ReplyOutput, Output: []byte("1")}}), runtime.StatusCompleted},
		// A late step commit never reopens an ended run.
		{commit(8, false, runtime.Checkpoint{Calls: []runtime.CallRecord{wait}}), runtime.StatusCompleted},
	}
	ix := projections.NewRuns()
	for i, st := range steps {
		if err := ix.Apply(st.e); err != nil {
			t.Fatal(err)
		}
		if got, _ := ix.Get("r1"); got.Status != st.want {
			t.Fatalf("after event %d (%s): status %s, want %s", i+1, st.e.Subject, got.Status, st.want)
		}
	}
	if c := ix.Counts(); c[runtime.StatusCompleted] != 1 || c[runtime.StatusWaiting] != 0 {
		t.Fatalf("counts %v", c)
	}
}

// sequencer numbers the events a test builds: ev makes one from what
// events.New returned (failing the test on its error) at the next
// sequence, and last is the last sequence given.
func sequencer(t *testing.T) (ev func(subject string, e events.Envelope, err error) projections.Event, last func() uint64) {
	seq := uint64(0)
	return func(subject string, e events.Envelope, err error) projections.Event {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		seq++
		return projections.Event{Seq: seq, Subject: subject, Envelope: e}
	}, func() uint64 { return seq }
}
