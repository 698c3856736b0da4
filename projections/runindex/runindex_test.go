package runindex_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

func publish(t *testing.T, js njs.JetStream, subject string, e events.Envelope, id string) {
	t.Helper()
	body, hdrs, err := events.Encode(e, id)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range hdrs {
		m.Header.Set(k, v)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ix *runindex.Index, run string, st runtime.CallStatus) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if e, ok := ix.Get(run); ok && e.Status == st {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("run %s never became %s", run, st)
}

// The index follows the log, and an index rebuilt from sequence 1 is the
// same as the one that followed it live.
func TestIndexFollowsAndRebuilds(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	if _, err := jetstream.New(context.Background(), nc, jetstream.Config{}); err != nil {
		t.Fatal(err)
	}
	js, _ := njs.New(nc)
	at := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	ends := map[string][]runindex.Entry{}
	live, err := runindex.Start(context.Background(), projections.Source{JS: js}, runindex.Hooks{OnEnd: func(e runindex.Entry) {
		mu.Lock()
		defer mu.Unlock()
		ends[e.RunID] = append(ends[e.RunID], e)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close(context.Background())
	for i, r := range []events.Run{
		{RunID: "r1", SessionID: "s1", Agent: "a", RootRunID: "r1", Owner: "alice"},
		{RunID: "r2", SessionID: "s2", Agent: "b", RootRunID: "r1", ParentRunID: "r1", Owner: "alice"},
		{RunID: "r3", SessionID: "s3", Agent: "a", RootRunID: "r3", Owner: "bob"},
	} {
		e, _ := events.New(events.RunCreated, r.SessionID, r.RunID, 0, 0, at.Add(time.Duration(i)*time.Second), r)
		publish(t, js, events.RunCreatedSubject(r.SessionID, r.RunID), e, "c"+r.RunID)
	}
	done := events.NewRaw(events.CheckpointCommitted, "s2", "r2", 3, 1, at, events.CheckpointPayload([]byte(`{"revision":3,"reply":{"type":"output","output":1}}`)))
	publish(t, js, events.CheckpointSubject("s2", "r2", true), done, "d2")
	end, _ := events.New(events.RunEnded, "s3", "r3", 0, 0, at, events.Ended{Status: "cancelled", Reason: "by user"})
	publish(t, js, events.RunEndedSubject("s3", "r3"), end, "e3")
	waitFor(t, live, "r2", runtime.StatusCompleted)
	waitFor(t, live, "r3", runtime.StatusCancelled)

	if got := live.List("alice", false); len(got) != 1 || got[0].RunID != "r1" || got[0].Status != runtime.StatusRunning {
		t.Fatalf("alice's roots = %+v", got)
	}
	if got := live.List("alice", true); len(got) != 2 {
		t.Fatalf("alice's runs with children = %+v", got)
	}
	if c := live.Counts(); c[runtime.StatusRunning] != 1 || c[runtime.StatusCompleted] != 1 || c[runtime.StatusCancelled] != 1 {
		t.Fatalf("counts = %v", c)
	}
	// Each run that ended was told once, as it ended, with its times (told
	// just after the index has it: wait for both).
	for i := 0; i < 500; i++ {
		mu.Lock()
		n := len(ends["r2"]) + len(ends["r3"])
		mu.Unlock()
		if n >= 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	if len(ends) != 2 || len(ends["r2"]) != 1 || len(ends["r3"]) != 1 || ends["r2"][0].Status != runtime.StatusCompleted ||
		ends["r3"][0].Status != runtime.StatusCancelled || !ends["r3"][0].Created.Equal(at.Add(2*time.Second)) || !ends["r3"][0].Updated.Equal(at) {
		t.Fatalf("ends told: %+v", ends)
	}
	mu.Unlock()
	rebuilt, err := runindex.Start(context.Background(), projections.Source{JS: js}, runindex.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close(context.Background())
	waitFor(t, rebuilt, "r3", runtime.StatusCancelled)
	for _, id := range []string{"r1", "r2", "r3"} {
		a, _ := live.Get(id)
		b, _ := rebuilt.Get(id)
		if a != b {
			t.Fatalf("run %s: live %+v, rebuilt %+v", id, a, b)
		}
	}
}
