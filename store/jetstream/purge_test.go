package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// A session's purge: the marker is fenced on the session's last sequence
// (a continuation written since wins), then everything of the session
// below it and its out-of-line payloads go; other sessions are untouched,
// every step may be done again, and a continuation after it is refused by
// the fence too.
func TestPurgeSession(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, nc, jetstream.Config{})
	ctx := context.Background()
	write := func(sessionID string, ended bool) {
		t.Helper()
		if _, err := s.CreateRun(ctx, events.Run{SessionID: sessionID, RunID: "r1", RootRunID: "r1", Agent: "a", Owner: "alice"}, 0, created); err != nil {
			t.Fatal(err)
		}
		h, err := s.Open(ctx, sessionID, "r1")
		if err != nil {
			t.Fatal(err)
		}
		big := strings.Repeat("0123456789abcdef", 80_000) // over the payload limit: kept in the object store
		if err := h.SaveCheckpoint(ctx, cp(1, text("m1", big))); err != nil {
			t.Fatal(err)
		}
		if !ended {
			return
		}
		done := cp(2)
		done.Phase, done.Reply = runtime.PhaseCompleted, &runtime.Reply{Type: runtime.ReplyNeedsInput, Question: "which one?"}
		if err := h.SaveCheckpoint(ctx, done); err != nil {
			t.Fatal(err)
		}
	}
	write("s1", true)
	write("other", true)
	otherBefore := streamMsgs(t, nc, "CAIRN", events.SessionAll("other"))

	sl, err := s.ReadSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(sl.Runs) != 1 || sl.Runs[0].Status != "needs_input" || sl.Runs[0].Owner != "alice" || sl.Runs[0].Ended.IsZero() ||
		len(sl.Objects) != 1 || sl.Events < 4 || sl.Purge != nil {
		t.Fatalf("ReadSession = %+v; want one run ended needs_input, one object", sl)
	}

	// A continuation of s1, written after the read: the marker, fenced on
	// what was read, is refused.
	if _, err := s.CreateRun(ctx, events.Run{SessionID: "s1", RunID: "r2", RootRunID: "r2", Agent: "a", Continues: "r1"}, sl.Last, created); err != nil {
		t.Fatal(err)
	}
	p := events.Purge{Runs: sl.Runs, Before: sl.Last, Events: sl.Events, Bytes: sl.Bytes, Objects: sl.Objects, Retention: "1h0m0s"}
	if _, err := s.WritePurge(ctx, "s1", p, created); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("WritePurge on a session that moved on = %v, want ErrConflict", err)
	}
	if sl, err = s.ReadSession(ctx, "s1"); err != nil || len(sl.Runs) != 2 || sl.Runs[1].Status != "" {
		t.Fatalf("ReadSession = %+v, %v; want r2 not ended", sl, err)
	}
	end, err := events.New(events.RunEnded, "s1", "r2", 0, 0, created, events.Ended{Status: "failed", Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := events.Encode(end, "end-r2")
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(events.RunEndedSubject("s1", "r2"))
	msg.Data = body
	if _, err := s.Write(ctx, msg, "end-r2", "", 0); err != nil {
		t.Fatal(err)
	}
	if sl, err = s.ReadSession(ctx, "s1"); err != nil || len(sl.Runs) != 2 || sl.Runs[1].Status != "failed" {
		t.Fatalf("ReadSession = %+v, %v; want r2 failed", sl, err)
	}

	p = events.Purge{Runs: sl.Runs, Before: sl.Last, Events: sl.Events, Bytes: sl.Bytes, Objects: sl.Objects, Retention: "1h0m0s"}
	marker, err := s.WritePurge(ctx, "s1", p, created)
	if err != nil || marker <= sl.Last {
		t.Fatalf("WritePurge = %d, %v; want a marker after %d", marker, err, sl.Last)
	}
	if _, err := s.CreateRun(ctx, events.Run{SessionID: "s1", RunID: "r3", RootRunID: "r3", Agent: "a", Continues: "r2"}, sl.Last, created); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("a continuation fenced before the marker = %v, want ErrConflict", err)
	}
	for range 2 { // and once more: it may be done again
		if err := s.FinishPurge(ctx, "s1", marker, p.Objects); err != nil {
			t.Fatal(err)
		}
	}
	if n := streamMsgs(t, nc, "CAIRN", events.SessionAll("s1")); n != 1 {
		t.Fatalf("session s1 holds %d events after its purge, want its marker alone", n)
	}
	if n := streamMsgs(t, nc, "CAIRN", events.SessionAll("other")); n != otherBefore {
		t.Fatalf("session other holds %d events after s1's purge, want %d", n, otherBefore)
	}
	js, _ := njs.New(nc)
	blobs, err := js.ObjectStore(ctx, "CAIRN_BLOBS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.GetInfo(ctx, p.Objects[0]); !errors.Is(err, njs.ErrObjectNotFound) {
		t.Fatalf("s1's payload object after the purge: %v, want it gone", err)
	}
	if other, err := s.ReadSession(ctx, "other"); err != nil || len(other.Objects) != 1 {
		t.Fatalf("other session: %+v, %v", other, err)
	} else if _, err := blobs.GetInfo(ctx, other.Objects[0]); err != nil {
		t.Fatalf("other session's payload object: %v, want it kept", err)
	}

	after, err := s.ReadSession(ctx, "s1")
	if err != nil || after.Purge == nil || after.PurgeSeq != marker || after.Events != 1 || len(after.Purge.Runs) != 2 || after.Purge.Runs[0].Status != "needs_input" {
		t.Fatalf("ReadSession after the purge = %+v, %v; want the marker alone, listing both runs", after, err)
	}
	for _, run := range []string{"r1", "r2"} {
		if ok, err := s.RunFinished(ctx, "s1", run); err != nil || !ok {
			t.Fatalf("RunFinished(%s) = %v, %v; want a purged run finished", run, ok, err)
		}
	}
	if r, err := s.ReadRun(ctx, "s1", "r1"); err != nil || r != nil {
		t.Fatalf("ReadRun of a purged run = %+v, %v; want none", r, err)
	}
	if _, err := s.WritePurge(ctx, "s1", events.Purge{}, created); err == nil {
		t.Fatal("WritePurge without a sequence to fence on succeeded")
	}
	if _, err := s.ReadSession(ctx, "bad session"); err == nil {
		t.Fatal("ReadSession of a bad ID succeeded")
	}
	if sl, err := s.ReadSession(ctx, "none"); err != nil || sl != nil {
		t.Fatalf("ReadSession of no session = %+v, %v; want nil", sl, err)
	}
}
