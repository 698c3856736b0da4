// Package storetest is the conformance suite every runtime.Store passes:
// storetest.Run(t, open) against the memory store and the JetStream store
// alike, so the run loop's guarantees (C11-C18) hold whatever backs it.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// Opener acquires the lease of a run in a session and returns the store
// scoped to it. Opening a run again fences out every earlier handle of it.
// Opening another run of a session whose admitted run has not completed
// fails with runtime.ErrSessionBusy.
type Opener interface {
	Open(ctx context.Context, sessionID, runID string) (runtime.Store, error)
}

// Run runs the suite. newOpener is called once per subtest and must return
// an opener over empty state.
func Run(t *testing.T, newOpener func(t *testing.T) Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, o Opener)
	}{
		{"C11_FreshRunLoadsNil", testFresh},
		{"C11_EveryFieldRoundTrips", testRoundTrip},
		{"C13_RevisionAdvancesByExactlyOne", testRevisionSequence},
		{"C13_IdenticalRetryAppendsOnce", testIdenticalRetry},
		{"C11_UsedCallIDsSurviveManyRevisions", testUsedCallIDs},
		{"C11_CallJournalSurvivesEveryRevision", testCallJournal},
		{"C13_IdenticalRetryWhateverTheUsedIDs", testRetryUsedIDs},
		{"C13_ConflictingRevisionFails", testConflictingRevision},
		{"C13_ConcurrentWritersOneWins", testConcurrentWriters},
		{"C12_AppendAndCheckpointMoveTogether", testAtomicAppend},
		{"C14_LoaderMayReturnAppend", testAppendPayload},
		{"C15_CompactReplacesWindowKeepsHistory", testCompact},
		{"C15_CompactFencedByWindowAndLease", testCompactFencing},
		{"C16_MessageIDsAndMetadataPersist", testMetadata},
		{"C18_NewLeaseFencesOldWriter", testLeaseFencing},
		{"C18_SessionContinuationsSerialized", testSessionSerialized},
		{"C18_RacingContinuationsOneAdmitted", testRacingContinuations},
		{"DuplicateMessageIDRejected", testDuplicateMessageID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newOpener(t))
		})
	}
}

func open(t *testing.T, o Opener, sess, run string) runtime.Store {
	t.Helper()
	s, err := o.Open(context.Background(), sess, run)
	if err != nil {
		t.Fatalf("open %s/%s: %v", sess, run, err)
	}
	return s
}

func text(id, s string) model.Message { return model.TextMessage(id, model.RoleUser, s) }

func cp(rev int64, appends ...model.Message) *runtime.Checkpoint {
	return &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseModel, Append: appends}
}

func save(t *testing.T, s runtime.Store, c *runtime.Checkpoint) {
	t.Helper()
	if err := s.SaveCheckpoint(context.Background(), c); err != nil {
		t.Fatalf("save rev %d: %v", c.Revision, err)
	}
}

func ids(msgs []model.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func window(t *testing.T, s runtime.Store) []string {
	t.Helper()
	w, err := s.Load(context.Background())
	if err != nil {
		t.Fatalf("load window: %v", err)
	}
	return ids(w)
}

func history(t *testing.T, s runtime.Store) []string {
	t.Helper()
	a, ok := s.(session.Auditor)
	if !ok {
		t.Fatalf("%T does not implement session.Auditor", s)
	}
	h, err := a.History(context.Background())
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	return ids(h)
}

func wantIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func testFresh(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	got, err := s.LoadCheckpoint(context.Background())
	if err != nil || got != nil {
		t.Fatalf("fresh LoadCheckpoint = %v, %v; want nil, nil", got, err)
	}
	wantIDs(t, "fresh window", window(t, s))
}

// full is a checkpoint with every field set.
func full(rev int64) *runtime.Checkpoint {
	res := model.Message{ID: "k-1-1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{
		CallID: "c1", Name: "run_js", Content: `{"result":12345678901234567890.5}`, IsError: true,
		Attachments: []model.Attachment{{Ref: "obj://b/1", MediaType: "image/png", Name: "a.png", Size: 42}}}}}}
	return &runtime.Checkpoint{
		Version: runtime.CheckpointVersion, ContractHash: "abc", Revision: rev, RunKey: "k", Phase: runtime.PhaseCompleted, Step: 3,
		ResponseID: "k-1-0",
		Calls: []runtime.CallRecord{
			{ID: "c1", Name: "run_js", Args: `{"code": "return 1"` /* malformed on purpose */, State: runtime.CallError, ResultID: res.ID},
			{ID: "c2", Name: "complete", Args: `{"type":"output","output":{"n":12345678901234567890}}`, State: runtime.CallDone},
			{ID: "c3", Name: "get_calls", Args: `{}`, State: runtime.CallSkipped},
		},
		UsedCallIDs: []string{"c0", "c1", "c2", "c3"},
		Reply:       &runtime.Reply{Type: runtime.ReplyOutput, Output: json.RawMessage(`{"n":12345678901234567890}`)},
		Append:      []model.Message{text("k-1-0", "hello"), res},
	}
}

func testRoundTrip(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	want := full(1)
	save(t, s, want)
	got, err := s.LoadCheckpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got.Append = nil // a loader may or may not return the payload (C14)
	w := *want
	w.Append = nil
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(&w)
	if string(gb) != string(wb) {
		t.Fatalf("checkpoint changed in the store:\n got %s\nwant %s", gb, wb)
	}
}

func testRevisionSequence(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	ctx := context.Background()
	wantErr(t, s.SaveCheckpoint(ctx, cp(0)), runtime.ErrConflict, "revision 0")
	wantErr(t, s.SaveCheckpoint(ctx, cp(2)), runtime.ErrConflict, "revision 2 first")
	save(t, s, cp(1, text("m1", "a")))
	wantErr(t, s.SaveCheckpoint(ctx, cp(3)), runtime.ErrConflict, "revision 3 after 1")
	save(t, s, cp(2, text("m2", "b")))
	wantErr(t, s.SaveCheckpoint(ctx, cp(1, text("m9", "z"))), runtime.ErrConflict, "stale revision 1")
	got, err := s.LoadCheckpoint(ctx)
	if err != nil || got.Revision != 2 {
		t.Fatalf("load = %+v, %v; want revision 2", got, err)
	}
	wantIDs(t, "window", window(t, s), "m1", "m2")
}

// A long run's used call IDs come back whole and in order from every
// reload, whatever the store keeps per revision (the JetStream store lists
// most revisions' IDs on top of an earlier full listing); an identical
// retry of a revision is accepted and one that changes an earlier ID is a
// conflict (C13).
func testUsedCallIDs(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o, "s", "r")
	var used []string
	for rev := int64(1); rev <= 300; rev++ {
		for i := 0; i < int(rev%4); i++ { // 0 to 3 new IDs a revision
			used = append(used, fmt.Sprintf("toolu_%03d_%d", rev, i))
		}
		c := cp(rev, text(fmt.Sprintf("m%d", rev), "x"))
		c.UsedCallIDs = append([]string(nil), used...)
		save(t, s, c)
		if rev%97 == 0 || rev == 5 {
			again := *c
			again.UsedCallIDs = append([]string(nil), used...)
			save(t, s, &again) // an identical retry
			if len(used) > 0 {
				changed := *c
				changed.UsedCallIDs = append([]string{"other"}, used[1:]...)
				wantErr(t, s.SaveCheckpoint(ctx, &changed), runtime.ErrConflict, fmt.Sprintf("rev %d again with an earlier ID changed", rev))
			}
			s = open(t, o, "s", "r") // a new attempt reloads
		}
		got, err := s.LoadCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Revision != rev || strings.Join(got.UsedCallIDs, ",") != strings.Join(used, ",") {
			t.Fatalf("rev %d reloaded as rev %d with %d used call IDs, want %d: %v", rev, got.Revision, len(got.UsedCallIDs), len(used), got.UsedCallIDs)
		}
	}
}

// A response's call journal comes back whole from every reload, whatever
// the store keeps per revision (the JetStream store lists a response's
// calls once and then each revision's changes): through responses of many
// calls, a response whose calls differ only in arguments, and a revision
// with no calls; an identical retry of any revision is accepted, on the
// handle that wrote it and on a new one, and one that changes an earlier
// call is a conflict (C13).
func testCallJournal(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o, "s", "r")
	var calls []runtime.CallRecord
	rev := int64(0)
	commit := func(c []runtime.CallRecord, check bool) {
		t.Helper()
		rev++
		calls = c
		next := cp(rev, text(fmt.Sprintf("m%d", rev), "x"))
		next.Calls = slices.Clone(c)
		save(t, s, next)
		if !check {
			return
		}
		retry := *next
		retry.Calls = slices.Clone(c)
		save(t, s, &retry) // an identical retry
		if len(c) > 0 {
			changed := *next
			changed.Calls = slices.Clone(c)
			changed.Calls[0].ResultID += "-other"
			wantErr(t, s.SaveCheckpoint(ctx, &changed), runtime.ErrConflict, fmt.Sprintf("rev %d again with call 0 changed", rev))
		}
		s = open(t, o, "s", "r") // a new attempt reloads
		save(t, s, &retry)       // and may retry the revision it found
		got, err := s.LoadCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gb, _ := json.Marshal(got.Calls)
		wb, _ := json.Marshal(c)
		if got.Revision != rev || string(gb) != string(wb) {
			t.Fatalf("rev %d reloaded as rev %d with calls\n%s\nwant\n%s", rev, got.Revision, gb, wb)
		}
	}
	response := func(step, n int, args string) []runtime.CallRecord {
		out := make([]runtime.CallRecord, n)
		for i := range out {
			out[i] = runtime.CallRecord{ID: fmt.Sprintf("toolu_%d_%03d", step, i), Name: "run_js", Args: fmt.Sprintf(`{"code":"return %d","pad":%q}`, i, args), State: runtime.CallPending}
		}
		return out
	}
	for step, n := range []int{1, 30, 7} {
		c := response(step, n, "a")
		commit(c, true)
		for i := range c {
			c = slices.Clone(c)
			c[i].State = runtime.CallDispatching
			commit(c, i%5 == 0)
			c = slices.Clone(c)
			c[i].State, c[i].ResultID = runtime.CallDone, fmt.Sprintf("k-%d-%d", step, i)
			if i == n-2 { // the last two together, as a completion skips the rest
				c[i+1].State, c[i+1].ResultID = runtime.CallSkipped, fmt.Sprintf("k-%d-%d", step, i+1)
			}
			commit(c, i%7 == 3 || i == n-1)
			if i == n-2 {
				break
			}
		}
		commit(calls, true) // the next model step: the journal as it was
	}
	// The same calls with other arguments are another journal.
	c := response(9, 3, "a")
	commit(c, true)
	commit(response(9, 3, "b"), true)
	commit(nil, true)
}

// An identical retry is accepted, and a changed one refused, whether a
// revision's used call IDs extend the revision before's or not (the loop
// only extends them; a store must not depend on it).
func testRetryUsedIDs(t *testing.T, o Opener) {
	ctx := context.Background()
	s := open(t, o, "s", "r")
	for rev, used := range [][]string{{"a", "b", "c"}, {"x"}, {"x", "y", "z", "w"}, nil, {"q"}, {"q", "r"}} {
		c := cp(int64(rev+1), text(fmt.Sprintf("m%d", rev+1), "x"))
		c.UsedCallIDs = slices.Clone(used)
		save(t, s, c)
		retry := *c
		retry.UsedCallIDs = slices.Clone(used)
		save(t, s, &retry)
		changed := *c
		changed.UsedCallIDs = append(slices.Clone(used), "other")
		wantErr(t, s.SaveCheckpoint(ctx, &changed), runtime.ErrConflict, fmt.Sprintf("rev %d again with another used ID", rev+1))
		got, err := s.LoadCheckpoint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.UsedCallIDs, used) {
			t.Fatalf("rev %d loaded used call IDs %v, want %v", rev+1, got.UsedCallIDs, used)
		}
	}
}

func testIdenticalRetry(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	c := cp(1, text("m1", "a"))
	save(t, s, c)
	save(t, s, cp(1, text("m1", "a")))
	wantIDs(t, "window", window(t, s), "m1")
	wantIDs(t, "history", history(t, s), "m1")
	save(t, s, cp(2, text("m2", "b")))
	wantIDs(t, "window", window(t, s), "m1", "m2")
}

func testConflictingRevision(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	save(t, s, cp(1, text("m1", "a")))
	wantErr(t, s.SaveCheckpoint(context.Background(), cp(1, text("m1", "changed"))), runtime.ErrConflict, "same revision, other content")
	other := cp(1, text("m1", "a"))
	other.Phase = runtime.PhaseCalls
	wantErr(t, s.SaveCheckpoint(context.Background(), other), runtime.ErrConflict, "same revision, other checkpoint")
	w, err := s.Load(context.Background())
	if err != nil || len(w) != 1 || w[0].Text() != "a" {
		t.Fatalf("window after conflicts = %+v, %v", w, err)
	}
}

func testConcurrentWriters(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	save(t, s, cp(1, text("m1", "a")))
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = s.SaveCheckpoint(context.Background(), cp(2, text(fmt.Sprintf("w%d", i), "x")))
		}(i)
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, runtime.ErrConflict):
			t.Fatalf("racing save: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d racing writers of revision 2 succeeded, want exactly 1", wins)
	}
	if w := window(t, s); len(w) != 2 {
		t.Fatalf("window = %v, want m1 and the one winner", w)
	}
}

func testAtomicAppend(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	save(t, s, cp(1, text("m1", "a"), text("m2", "b")))
	// A failed commit appends nothing.
	_ = s.SaveCheckpoint(context.Background(), cp(3, text("m3", "c")))
	wantIDs(t, "window", window(t, s), "m1", "m2")
	got, err := s.LoadCheckpoint(context.Background())
	if err != nil || got.Revision != 1 {
		t.Fatalf("load = %+v, %v", got, err)
	}
}

func testAppendPayload(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	save(t, s, cp(1, text("m1", "a")))
	got, err := s.LoadCheckpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Append) > 0 && (len(got.Append) != 1 || got.Append[0].ID != "m1") {
		t.Fatalf("loaded Append = %v: a loader may return the payload, but intact", ids(got.Append))
	}
	// The next commit carries only its own payload.
	next := *got
	next.Revision, next.Append = 2, []model.Message{text("m2", "b")}
	save(t, s, &next)
	wantIDs(t, "history", history(t, s), "m1", "m2")
}

func testCompact(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	ctx := context.Background()
	save(t, s, cp(1, text("m1", "a"), text("m2", "b"), text("m3", "c")))
	err := s.Compact(ctx, session.Compaction{Through: "m3", Window: []model.Message{text("sum1", "summary"), text("m3", "c")}, Reason: "summary"})
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	wantIDs(t, "window after compaction", window(t, s), "sum1", "m3")
	save(t, s, cp(2, text("m4", "d")))
	wantIDs(t, "window after append", window(t, s), "sum1", "m3", "m4")
	wantIDs(t, "history", history(t, s), "m1", "m2", "m3", "m4")
	got, err := s.LoadCheckpoint(ctx)
	if err != nil || got.Revision != 2 {
		t.Fatalf("compaction must not be a revision: %+v, %v", got, err)
	}
}

func testCompactFencing(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	ctx := context.Background()
	save(t, s, cp(1, text("m1", "a"), text("m2", "b")))
	err := s.Compact(ctx, session.Compaction{Through: "m1", Window: []model.Message{text("x", "x")}})
	wantErr(t, err, runtime.ErrConflict, "compact of a window that moved on")
	wantIDs(t, "window", window(t, s), "m1", "m2")
	s2 := open(t, o, "s", "r")
	err = s.Compact(ctx, session.Compaction{Through: "m2", Window: []model.Message{text("x", "x")}})
	wantErr(t, err, runtime.ErrLeaseLost, "compact by a fenced-out writer")
	wantIDs(t, "window", window(t, s2), "m1", "m2")
}

func testMetadata(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	raw := []byte{0xff, 0x00, '{', '"', '<', '>', '&', 0xc3}
	m := model.Message{ID: "m1", Role: model.RoleAssistant, Meta: map[string][]byte{"openai.response_id": []byte("resp_1"), "opaque": raw}, Parts: []model.Part{
		{Type: model.PartReasoning, Text: "thinking...", Meta: map[string][]byte{"anthropic.signature": []byte("sig==")}},
		{Type: model.PartText, Text: "<b>& \u2028 \"quoted\""},
		{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: "c1", Name: "run_js", Args: "{ \"code\" :  \"return 1\" }"}},
		{Type: model.PartAttachment, Attachment: &model.Attachment{Ref: "obj://x", MediaType: "text/plain", Size: 3}},
	}}
	save(t, s, cp(1, m))
	w, err := s.Load(context.Background())
	if err != nil || len(w) != 1 {
		t.Fatalf("load: %v, %v", w, err)
	}
	if !reflect.DeepEqual(w[0], m) {
		t.Fatalf("message changed in the store:\n got %#v\nwant %#v", w[0], m)
	}
}

func testLeaseFencing(t *testing.T, o Opener) {
	old := open(t, o, "s", "r")
	save(t, old, cp(1, text("m1", "a")))
	cur := open(t, o, "s", "r")
	wantErr(t, old.SaveCheckpoint(context.Background(), cp(2, text("m2", "b"))), runtime.ErrLeaseLost, "old writer after a new lease")
	save(t, cur, cp(2, text("m3", "c")))
	wantIDs(t, "window", window(t, cur), "m1", "m3")
}

func testSessionSerialized(t *testing.T, o Opener) {
	ctx := context.Background()
	r1 := open(t, o, "s", "r1")
	save(t, r1, cp(1, text("m1", "a")))
	if _, err := o.Open(ctx, "s", "r2"); !errors.Is(err, runtime.ErrSessionBusy) {
		t.Fatalf("open of a second run while the first is active: %v, want ErrSessionBusy", err)
	}
	done := cp(2, text("m2", "answer"))
	done.Phase, done.Reply = runtime.PhaseCompleted, &runtime.Reply{Type: runtime.ReplyNeedsInput, Question: "which one?"}
	save(t, r1, done)
	r2 := open(t, o, "s", "r2")
	got, err := r2.LoadCheckpoint(ctx)
	if err != nil || got != nil {
		t.Fatalf("continuation run must start fresh: %+v, %v", got, err)
	}
	wantIDs(t, "continuation window", window(t, r2), "m1", "m2")
	save(t, r2, cp(1, text("m3", "b")))
	wantIDs(t, "history", history(t, r2), "m1", "m2", "m3")
	// The completed run can still be read (C7) without taking the session.
	again := open(t, o, "s", "r1")
	got, err = again.LoadCheckpoint(ctx)
	if err != nil || got.Reply == nil {
		t.Fatalf("completed run reload: %+v, %v", got, err)
	}
	save(t, r2, cp(2, text("m4", "c")))
}

// testRacingContinuations opens runs r1..r8 of a completed session at
// once (one opener; a replicated deployment has one per node, and the
// store's fence is on the server): exactly one is admitted, the others are
// refused with ErrSessionBusy, and only the admitted one can commit.
func testRacingContinuations(t *testing.T, o Opener) {
	ctx := context.Background()
	first := open(t, o, "s", "r0")
	done := cp(1, text("m0", "answer"))
	done.Phase, done.Reply = runtime.PhaseCompleted, &runtime.Reply{Type: runtime.ReplyNeedsInput, Question: "and then?"}
	save(t, first, done)
	const n = 8
	stores := make([]runtime.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = o.Open(ctx, "s", fmt.Sprintf("r%d", i+1))
		}()
	}
	wg.Wait()
	admitted := -1
	for i, err := range errs {
		switch {
		case err == nil && admitted >= 0:
			t.Fatalf("runs r%d and r%d were both admitted to the session", admitted+1, i+1)
		case err == nil:
			admitted = i
		case !errors.Is(err, runtime.ErrSessionBusy):
			t.Fatalf("open r%d: %v, want ErrSessionBusy or admission", i+1, err)
		}
	}
	if admitted < 0 {
		t.Fatal("no run was admitted to the completed session")
	}
	save(t, stores[admitted], cp(1, text("m1", "next")))
	wantIDs(t, "history", history(t, stores[admitted]), "m0", "m1")
}

func testDuplicateMessageID(t *testing.T, o Opener) {
	s := open(t, o, "s", "r")
	save(t, s, cp(1, text("m1", "a")))
	wantErr(t, s.SaveCheckpoint(context.Background(), cp(2, text("m1", "again"))), runtime.ErrConflict, "message ID appended twice")
	wantIDs(t, "history", history(t, s), "m1")
}
