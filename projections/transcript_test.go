package projections_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// A session's transcript keeps every message; its window is the last
// compaction's window and what came after it.
func TestTranscriptWindowAfterCompaction(t *testing.T) {
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	commit := func(seq uint64, rev int64, ids ...string) projections.Event {
		cp := runtime.Checkpoint{Version: 1, Revision: rev, RunKey: "k"}
		for _, id := range ids {
			cp.Append = append(cp.Append, model.TextMessage(id, model.RoleUser, id))
		}
		b, _ := json.Marshal(cp)
		return projections.Event{Seq: seq, Subject: events.CheckpointSubject("s1", "r1", false),
			Envelope: events.NewRaw(events.CheckpointCommitted, "s1", "r1", rev, 1, at, events.CheckpointPayload(b))}
	}
	comp, _ := events.New(events.WindowCompacted, "s1", "r1", 2, 1, at, events.Compaction{RunID: "r1",
		Compaction: session.Compaction{Through: "b", Reason: "summary", Window: []model.Message{model.TextMessage("sum", model.RoleUser, "summary")}}})
	tr := projections.NewTranscripts("s1")
	for _, e := range []projections.Event{
		commit(1, 1, "a"), commit(2, 2, "b"),
		{Seq: 3, Subject: events.SessionCompactions("s1"), Envelope: comp},
		commit(4, 3, "c", "d"),
	} {
		if err := tr.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	s, ok := tr.Session("s1")
	if !ok {
		t.Fatal("no session")
	}
	ids := func(ms []model.Message) (out []string) {
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	var all []model.Message
	for _, e := range s.Entries {
		all = append(all, e.Message)
	}
	if got := ids(all); len(got) != 4 || got[3] != "d" {
		t.Fatalf("transcript = %v", got)
	}
	if got := ids(s.Window()); len(got) != 3 || got[0] != "sum" || got[1] != "c" || got[2] != "d" {
		t.Fatalf("window = %v, want [sum c d]", got)
	}
	if c := s.Compactions; len(c) != 1 || c[0].At != 2 || c[0].Reason != "summary" {
		t.Fatalf("compactions = %+v", c)
	}
}
