package jetstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// oneResponse commits a response of n calls to run r of session s on h:
// the response's commit, then each call dispatched and done, one revision
// each, and returns the whole journal of each revision.
func oneResponse(t *testing.T, h runtime.Store, n int) [][]runtime.CallRecord {
	t.Helper()
	calls := make([]runtime.CallRecord, n)
	for i := range calls {
		calls[i] = runtime.CallRecord{ID: fmt.Sprintf("toolu_%04d", i), Name: "run_js",
			Args: fmt.Sprintf(`{"code":"return %d + %s"}`, i, strings.Repeat("1", 100)), State: runtime.CallPending}
	}
	var journals [][]runtime.CallRecord
	rev := int64(0)
	commit := func() {
		rev++
		journals = append(journals, slices.Clone(calls))
		c := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseCalls,
			ResponseID: "k-1-0", Calls: slices.Clone(calls)}
		if err := h.SaveCheckpoint(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	commit()
	for i := range calls {
		calls[i].State = runtime.CallDispatching
		commit()
		calls[i].State, calls[i].ResultID = runtime.CallDone, fmt.Sprintf("k-%d-0", rev+1)
		commit()
	}
	return journals
}

// A response's calls are listed whole once, by its commit; every later
// revision lists only the call it changes, without its arguments: a
// response of n calls writes O(n) bytes of journal, where listing it
// whole in every revision wrote O(n²) (1,000 calls: 123 KB per call).
// Every revision reads back whole, from a new handle and LastCheckpoint.
func TestCallsListedOnce(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, nc, jetstream.Config{})
	js, _ := njs.New(nc)
	h, err := s.Open(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	journals := oneResponse(t, h, n)
	var sizes []int
	for _, m := range logMsgs(t, js) {
		if !events.SubjectMatches(events.RunCheckpoints("s", "r"), m.Subject) {
			continue
		}
		e, err := events.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		p, err := events.DecodeCheckpoint(e)
		if err != nil {
			t.Fatal(err)
		}
		rev := p.Checkpoint.Revision
		switch {
		case rev == 1 && (!p.ListsCalls() || len(p.Checkpoint.Calls) != n):
			t.Fatalf("the response's commit lists %d calls (whole: %v), want all %d", len(p.Checkpoint.Calls), p.ListsCalls(), n)
		case rev > 1 && (p.ListsCalls() || p.CallsBaseRev != 1 || len(p.Checkpoint.Calls) != 1 || p.Checkpoint.Calls[0].Args != ""):
			t.Fatalf("revision %d lists %d calls on revision %d (whole: %v), want the one it changed, without arguments: %+v",
				rev, len(p.Checkpoint.Calls), p.CallsBaseRev, p.ListsCalls(), p.Checkpoint.Calls)
		}
		sizes = append(sizes, len(m.Data))
	}
	if len(sizes) != 2*n+1 {
		t.Fatalf("%d checkpoint events, want %d", len(sizes), 2*n+1)
	}
	// A change costs the same at the end of the response as at its start.
	if first, last := sizes[2], sizes[len(sizes)-1]; last > first+16 {
		t.Fatalf("the last revision is %d bytes, the first change %d: the journal grows with the calls before it", last, first)
	}
	for _, reopen := range []bool{false, true} {
		if reopen {
			if h, err = s.Open(ctx, "s", "r"); err != nil {
				t.Fatal(err)
			}
		}
		got, err := h.LoadCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantCalls(t, got.Calls, journals[len(journals)-1])
	}
	last, err := s.LastCheckpoint(ctx, events.RunCheckpoints("s", "r"))
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, last.Calls, journals[len(journals)-1])
	// The completed commit lists no change; a read-only handle of the
	// completed run folds the journal when it is loaded.
	done := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: last.Revision + 1, RunKey: "k", Phase: runtime.PhaseCompleted,
		ResponseID: "k-1-0", Calls: journals[len(journals)-1], Reply: &runtime.Reply{Type: runtime.ReplyOutput, Output: []byte(`{}`)}}
	if err := h.SaveCheckpoint(ctx, done); err != nil {
		t.Fatal(err)
	}
	ro, err := s.Open(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ro.LoadCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reply == nil {
		t.Fatal("the completed run loads without its reply")
	}
	wantCalls(t, got.Calls, journals[len(journals)-1])
}

// In a copy of the log whose sequences differ, the listing a revision's
// calls build on is found by its revision: the run loads whole.
func TestCallsBaseInACopy(t *testing.T) {
	ctx := context.Background()
	src := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, src, jetstream.Config{})
	h, err := s.Open(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	journals := oneResponse(t, h, 20)
	if h, err = copyLog(t, src, 3).Open(ctx, "s", "r"); err != nil {
		t.Fatal(err)
	}
	got, err := h.LoadCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, got.Calls, journals[len(journals)-1])
}

func wantCalls(t *testing.T, got, want []runtime.CallRecord) {
	t.Helper()
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Fatalf("calls\n%s\nwant\n%s", gb, wb)
	}
}

// A store writes at most the schema version its Config.Schema gives (a
// cluster's level), each event at the least version that reads it: at
// level 1 every event is version 1 and every checkpoint lists its calls
// whole, what a build of version 1 reads; once the level is 2 the run goes
// on listing only changes (version 2), and back at 1 whole again. Events
// whose payload every version reads (the run's record, its leases) stay
// version 1. The run loads whole throughout.
func TestWritesTheLevelsVersion(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	var level atomic.Int64
	level.Store(1)
	s := newStore(t, nc, jetstream.Config{Schema: func() int { return int(level.Load()) }})
	js, _ := njs.New(nc)
	if _, err := s.CreateRun(ctx, events.Run{RunID: "r", SessionID: "s", Agent: "a", RootRunID: "r"}, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	calls := make([]runtime.CallRecord, 10)
	for i := range calls {
		calls[i] = runtime.CallRecord{ID: fmt.Sprintf("c%d", i), Name: "run_js", Args: `{"code":"1"}`, State: runtime.CallPending}
	}
	levels := []int64{1, 1, 1, 2, 2, 2, 1, 1, 2}
	for i, lv := range levels {
		level.Store(lv)
		if i > 0 {
			calls[i-1].State, calls[i-1].ResultID = runtime.CallDone, fmt.Sprintf("k-%d-0", i+1)
		}
		c := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: int64(i + 1), RunKey: "k", Phase: runtime.PhaseCalls,
			ResponseID: "k-1-0", Calls: slices.Clone(calls)}
		if err := h.SaveCheckpoint(ctx, c); err != nil {
			t.Fatal(err)
		}
		if i == 4 { // a new attempt at level 2
			if h, err = s.Open(ctx, "s", "r"); err != nil {
				t.Fatal(err)
			}
		}
		got, err := h.LoadCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantCalls(t, got.Calls, calls)
	}
	rev := 0
	for _, m := range logMsgs(t, js) {
		e, err := events.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if e.Type != events.CheckpointCommitted {
			if e.Version != 1 {
				t.Fatalf("%s is version %d, want 1: every version reads it", e.Type, e.Version)
			}
			continue
		}
		p, err := events.DecodeCheckpoint(e)
		if err != nil {
			t.Fatal(err)
		}
		lv := levels[rev]
		rev++
		// At level 2 a revision lists changes (version 2): it has a
		// listing, the revision before, to build on.
		if delta := !p.ListsCalls(); delta != (lv == 2) || e.Version != int(lv) {
			t.Fatalf("revision %d at level %d: version %d, lists changes only: %v", rev, lv, e.Version, delta)
		}
	}
	if rev != len(levels) {
		t.Fatalf("%d checkpoints, want %d", rev, len(levels))
	}
}
