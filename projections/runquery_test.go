package projections_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
)

// runLog builds a log for the run index, one event at a time.
type runLog struct {
	t    *testing.T
	ix   *projections.Runs
	tree *projections.CallTree
	fs   []*projections.Follower
	seq  uint64
}

func newRunLog(t *testing.T) *runLog {
	ix, tree := projections.NewRuns(), projections.NewCallTree()
	return &runLog{t: t, ix: ix, tree: tree, fs: []*projections.Follower{projections.NewFollower(ix), projections.NewFollower(tree)}}
}

func (l *runLog) offer(subject string, e events.Envelope, err error) {
	l.t.Helper()
	if err != nil {
		l.t.Fatal(err)
	}
	l.seq++
	for _, f := range l.fs {
		if _, err := f.Offer(projections.Event{Seq: l.seq, Subject: subject, Envelope: e}); err != nil {
			l.t.Fatal(err)
		}
	}
}

func (l *runLog) created(run, agent, owner, parent string, at time.Time) {
	l.t.Helper()
	p := events.Run{RunID: run, SessionID: "s-" + run, Agent: agent, Owner: owner, RootRunID: run, ParentRunID: parent}
	e, err := events.New(events.RunCreated, "s-"+run, run, 0, 0, at, p)
	l.offer(events.RunCreatedSubject("s-"+run, run), e, err)
}

func (l *runLog) completed(run string, reply runtime.Reply, at time.Time) {
	l.t.Helper()
	cp := runtime.Checkpoint{Version: 1, Revision: 1, RunKey: run, Step: 1, Phase: runtime.PhaseCompleted, Reply: &reply}
	b, err := json.Marshal(cp)
	l.offer(events.CheckpointSubject("s-"+run, run, true), events.NewRaw(events.CheckpointCommitted, "s-"+run, run, 1, 1, at, events.CheckpointPayload(b)), err)
}

func (l *runLog) ended(run string, st runtime.CallStatus, at time.Time) {
	l.t.Helper()
	e, err := events.New(events.RunEnded, "s-"+run, run, 0, 0, at, events.Ended{Status: string(st), Reason: "why"})
	l.offer(events.RunEndedSubject("s-"+run, run), e, err)
}

// A run that completed asking a question shows needs_input, a status of
// its own, in the run index and the call tree (it showed completed
// before); one that completed with an output shows completed.
func TestRunIndexNeedsInput(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newRunLog(t)
	l.created("asks", "a", "", "", at)
	l.created("answers", "a", "", "", at)
	l.completed("asks", runtime.Reply{Type: runtime.ReplyNeedsInput, Question: "Which dataset?"}, at.Add(time.Second))
	l.completed("answers", runtime.Reply{Type: runtime.ReplyOutput, Output: json.RawMessage(`{}`)}, at.Add(time.Second))
	for run, want := range map[string]runtime.CallStatus{"asks": runtime.StatusNeedsInput, "answers": runtime.StatusCompleted} {
		if e, _ := l.ix.Get(run); e.Status != want {
			t.Errorf("%s: %s in the run index; want %s", run, e.Status, want)
		}
		if r, _ := l.tree.Run(run); r.Status != want {
			t.Errorf("%s: %s in the call tree; want %s", run, r.Status, want)
		}
	}
	if c := l.ix.Counts(); c[runtime.StatusNeedsInput] != 1 || c[runtime.StatusCompleted] != 1 {
		t.Errorf("counts %v", c)
	}
}

// Each filter of a query, alone and together, against the same index.
func TestRunQueryFilters(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newRunLog(t)
	// r1..r6 created a minute apart; r7 and r8 are r2's children.
	l.created("r1", "researcher", "alice", "", t0)
	l.created("r2", "planner", "alice", "", t0.Add(1*time.Minute))
	l.created("r3", "researcher", "bob", "", t0.Add(2*time.Minute))
	l.created("r4", "planner", "bob", "", t0.Add(3*time.Minute))
	l.created("r5", "researcher", "alice", "", t0.Add(4*time.Minute))
	l.created("r6", "researcher", "alice", "", t0.Add(5*time.Minute))
	l.created("r7", "worker", "alice", "r2", t0.Add(6*time.Minute))
	l.created("r8", "worker", "alice", "r2", t0.Add(7*time.Minute))
	l.completed("r1", runtime.Reply{Type: runtime.ReplyOutput, Output: json.RawMessage(`1`)}, t0)
	l.completed("r3", runtime.Reply{Type: runtime.ReplyNeedsInput, Question: "?"}, t0)
	l.ended("r4", runtime.StatusFailed, t0)
	l.ended("r5", runtime.StatusCancelled, t0)
	l.completed("r7", runtime.Reply{Type: runtime.ReplyOutput, Output: json.RawMessage(`1`)}, t0)

	for _, tc := range []struct {
		name string
		q    projections.RunQuery
		want string
	}{
		{"roots, newest first", projections.RunQuery{}, "r6 r5 r4 r3 r2 r1"},
		{"children too", projections.RunQuery{Children: true}, "r8 r7 r6 r5 r4 r3 r2 r1"},
		{"an owner", projections.RunQuery{Owner: "bob"}, "r4 r3"},
		{"a status", projections.RunQuery{Statuses: []runtime.CallStatus{runtime.StatusRunning}}, "r6 r2"},
		{"needs_input", projections.RunQuery{Statuses: []runtime.CallStatus{runtime.StatusNeedsInput}}, "r3"},
		{"any of statuses", projections.RunQuery{Statuses: []runtime.CallStatus{runtime.StatusFailed, runtime.StatusCancelled}}, "r5 r4"},
		{"an agent", projections.RunQuery{Agent: "planner"}, "r4 r2"},
		{"a parent's children", projections.RunQuery{Parent: "r2"}, "r8 r7"},
		{"a parent's running children", projections.RunQuery{Parent: "r2", Statuses: []runtime.CallStatus{runtime.StatusRunning}}, "r8"},
		{"since", projections.RunQuery{Since: t0.Add(4 * time.Minute)}, "r6 r5"},
		{"until (before)", projections.RunQuery{Until: t0.Add(1 * time.Minute)}, "r1"},
		{"a window", projections.RunQuery{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, "r3 r2"},
		{"a run ID", projections.RunQuery{Q: "r5"}, "r5"},
		{"a session ID prefix", projections.RunQuery{Q: "s-r", Owner: "alice", Agent: "researcher"}, "r6 r5 r1"},
		{"nothing", projections.RunQuery{Agent: "nobody"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := l.ix.Query(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(p.Runs); got != tc.want || p.Next != "" {
				t.Errorf("runs %q (next %q); want %q and no next page", got, p.Next, tc.want)
			}
		})
	}
}

// Paging visits every run once, in order, whatever the page size: runs
// created at the same instant are ordered by ID, and a run created while
// one pages (newer than the first page) does not shift the pages after.
func TestRunQueryPages(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const want = "r0 r1 r2 r3 r4 r5 r6 r7 r8 r9"
	for limit := 1; limit <= 11; limit++ {
		l := newRunLog(t)
		// r0 newest; r0-r2 at one instant, r3-r5 at the next older, ...
		for i := range 10 {
			l.created(fmt.Sprintf("r%d", i), "a", "", "", t0.Add(time.Duration((9-i)/3)*time.Second))
		}
		var got []string
		q := projections.RunQuery{Limit: limit}
		for pages := 0; ; pages++ {
			if pages > 20 {
				t.Fatalf("limit %d: more than 20 pages", limit)
			}
			p, err := l.ix.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Runs) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(p.Runs))
			}
			for _, r := range p.Runs {
				got = append(got, r.RunID)
			}
			if pages == 0 {
				l.created("newer", "a", "", "", t0.Add(time.Hour)) // while paging
			}
			if p.Next == "" {
				break
			}
			q.Cursor = p.Next
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("limit %d: pages gave %s; want %s", limit, g, want)
		}
	}
}

// A query that cannot be run is refused, naming its field and why.
func TestRunQueryRefusesBadInput(t *testing.T) {
	ix := projections.NewRuns()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		q    projections.RunQuery
		want string
	}{
		{projections.RunQuery{Statuses: []runtime.CallStatus{"done"}}, `status: "done" is not a status: want running, waiting, needs_input, completed, failed, cancelled, purged`},
		{projections.RunQuery{Limit: 1001}, "limit: 1001: want 1 to 1000"},
		{projections.RunQuery{Limit: -1}, "limit: -1: want 1 to 1000"},
		{projections.RunQuery{Since: t0, Until: t0}, "until: not after since"},
		{projections.RunQuery{Cursor: "!!"}, "cursor: not a cursor this index gave"},
		{projections.RunQuery{Cursor: "bm9wZQ"}, "cursor: not a cursor this index gave"},
	} {
		_, err := ix.Query(tc.q)
		if !errors.Is(err, projections.ErrBadQuery) || err.Error() != tc.want {
			t.Errorf("%+v: %v; want %q", tc.q, err, tc.want)
		}
	}
}

func ids(runs []projections.RunEntry) string {
	s := make([]string, len(runs))
	for i, r := range runs {
		s[i] = r.RunID
	}
	return strings.Join(s, " ")
}
