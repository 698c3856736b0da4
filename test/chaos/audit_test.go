package chaos_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/test/chaos"
)

// logBuilder writes a synthetic run log, one record per call, a
// millisecond apart.
type logBuilder struct {
	t    *testing.T
	seq  uint64
	at   time.Time
	recs []chaos.Record
}

func (b *logBuilder) add(subject string, typ events.Type, sess, run string, rev, epoch int64, payload any) {
	b.t.Helper()
	b.seq++
	b.at = b.at.Add(time.Millisecond)
	ev, err := events.New(typ, sess, run, rev, epoch, b.at, payload)
	if err != nil {
		b.t.Fatal(err)
	}
	b.recs = append(b.recs, chaos.Record{Seq: b.seq, Subject: subject, Time: b.at, Event: ev})
}

func (b *logBuilder) created(r events.Run) {
	b.add(events.RunCreatedSubject(r.SessionID, r.RunID), events.RunCreated, r.SessionID, r.RunID, 0, 0, r)
}

func (b *logBuilder) lease(sess, run string, epoch int64) {
	b.add(events.RunLease(sess, run), events.LeaseAcquired, sess, run, 0, epoch, events.Lease{Holder: "n1-x", Epoch: epoch})
}

func (b *logBuilder) commit(sess, run string, rev, epoch int64, cp runtime.Checkpoint) {
	cp.Revision = rev
	b.add(events.CheckpointSubject(sess, run, cp.Reply != nil), events.CheckpointCommitted, sess, run, rev, epoch, events.Checkpoint{Checkpoint: cp})
}

// ledgerCommit is commit carrying the run's budget totals l, at the
// version that has them (a reader of an earlier one ignores them).
func (b *logBuilder) ledgerCommit(sess, run string, rev, epoch int64, cp runtime.Checkpoint, l events.Ledger) {
	cp.Revision = rev
	b.add(events.CheckpointSubject(sess, run, cp.Reply != nil), events.CheckpointCommitted, sess, run, rev, epoch, events.Checkpoint{Checkpoint: cp, Ledger: &l})
	b.recs[len(b.recs)-1].Event.Version = events.LedgerVersion
}

func (b *logBuilder) ended(sess, run, status string) {
	b.add(events.RunEndedSubject(sess, run), events.RunEnded, sess, run, 0, 0, events.Ended{Status: status, Reason: "test"})
}

func reply(output string) *runtime.Reply {
	return &runtime.Reply{Type: "output", Output: json.RawMessage(output)}
}

func runJS(id string, state runtime.CallState) runtime.CallRecord {
	return runtime.CallRecord{ID: id, Name: "run_js", Args: `{"code":"1"}`, State: state}
}

// waitResult is a transcript message with a wait_calls result naming the
// children and their replies.
func waitResult(kids ...runtime.CallInfo) []model.Message {
	b, _ := json.Marshal(runtime.WaitResult{Calls: kids})
	return []model.Message{{ID: "m-wait", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult,
		ToolResult: &model.ToolResult{CallID: "call-wait", Name: runtime.ToolWait, Content: string(b)}}}}}
}

func child(call, run, output string) runtime.CallInfo {
	return runtime.CallInfo{AgentRunInfo: runtime.AgentRunInfo{CallID: call, RunID: run, Status: runtime.StatusCompleted}, Reply: reply(output)}
}

// researcher is a healthy log of one researcher run with its two
// children, as the node writes it: hooks change it along the way.
type researcher struct {
	key            string
	skipWaitFor    string // a child the parent's wait result leaves out
	wrongOutput    bool   // the parent's result of the fact-checker differs from its reply
	secondDispatch bool   // the parent's run_js is dispatched again
	crossAttempt   bool   // the parent's run_js result comes from a later attempt
	staleCommit    bool   // a commit under the first epoch after a second lease
	dupRevision    bool   // revision 2 appended twice
	gap            bool   // revision 3 skipped
	failChild      bool   // the summarizer ends failed
	noEnd          bool   // the parent never completes
	twice          bool   // the parent completes twice
	thirdChild     bool   // call-check spawns a second fact-checker
}

const (
	factOut = `{"verdict":"refuted","reason":"too narrow"}`
	sumOut  = `{"summary":"not visible"}`
)

func (h researcher) write(b *logBuilder) (root string) {
	root = "r-" + h.key
	sess := "s-" + h.key
	b.created(events.Run{RunID: root, SessionID: sess, Agent: "researcher", RootRunID: root, Message: chaos.Message(h.key)})
	b.lease(sess, root, 1)
	b.commit(sess, root, 1, 1, runtime.Checkpoint{Phase: runtime.PhaseModel})
	b.commit(sess, root, 2, 1, runtime.Checkpoint{Phase: runtime.PhaseCalls, Calls: []runtime.CallRecord{runJS("call-notes", runtime.CallDispatching)}})
	if h.dupRevision {
		b.commit(sess, root, 2, 1, runtime.Checkpoint{Phase: runtime.PhaseCalls, Calls: []runtime.CallRecord{runJS("call-notes", runtime.CallDispatching)}})
	}
	rev := int64(3)
	epoch := int64(1)
	if h.crossAttempt || h.secondDispatch {
		b.lease(sess, root, 2)
		epoch = 2
		if h.secondDispatch {
			b.commit(sess, root, rev, epoch, runtime.Checkpoint{Phase: runtime.PhaseCalls, Calls: []runtime.CallRecord{runJS("call-notes", runtime.CallPending)}})
			rev++
			b.commit(sess, root, rev, epoch, runtime.Checkpoint{Phase: runtime.PhaseCalls, Calls: []runtime.CallRecord{runJS("call-notes", runtime.CallDispatching)}})
			rev++
		}
	}
	if h.gap {
		rev++
	}
	b.commit(sess, root, rev, epoch, runtime.Checkpoint{Phase: runtime.PhaseCalls, Calls: []runtime.CallRecord{runJS("call-notes", runtime.CallDone)}})
	rev++
	if h.staleCommit {
		b.lease(sess, root, epoch+1)
		b.commit(sess, root, rev, epoch, runtime.Checkpoint{Phase: runtime.PhaseModel})
		rev++
		epoch++
	}

	kids := []struct{ call, run, agent, out string }{{"call-check", "c1-" + h.key, "fact-checker", factOut}, {"call-summary", "c2-" + h.key, "summarizer", sumOut}}
	if h.thirdChild {
		kids = append(kids, struct{ call, run, agent, out string }{"call-check", "c3-" + h.key, "fact-checker", factOut})
	}
	var infos []runtime.CallInfo
	for _, k := range kids {
		ks := "s" + k.run
		b.created(events.Run{RunID: k.run, SessionID: ks, Agent: k.agent, RootRunID: root, ParentRunID: root, ParentSessionID: sess, ParentCallID: k.call, Message: "{}"})
		b.lease(ks, k.run, 1)
		b.commit(ks, k.run, 1, 1, runtime.Checkpoint{Phase: runtime.PhaseModel})
		if h.failChild && k.agent == "summarizer" {
			b.ended(ks, k.run, "failed")
			continue
		}
		b.commit(ks, k.run, 2, 1, runtime.Checkpoint{Phase: runtime.PhaseCompleted, Reply: reply(k.out)})
		out := k.out
		if h.wrongOutput && k.agent == "fact-checker" {
			out = `{"verdict":"supported","reason":"made up"}`
		}
		if k.run != h.skipWaitFor {
			infos = append(infos, child(k.call, k.run, out))
		}
	}
	if h.noEnd {
		return root
	}
	b.commit(sess, root, rev, epoch, runtime.Checkpoint{Phase: runtime.PhaseModel, Append: waitResult(infos...)})
	rev++
	b.commit(sess, root, rev, epoch, runtime.Checkpoint{Phase: runtime.PhaseCompleted, Reply: reply(`{"answer":"no"}`)})
	if h.twice {
		b.commit(sess, root, rev+1, epoch, runtime.Checkpoint{Phase: runtime.PhaseCompleted, Reply: reply(`{"answer":"no"}`)})
	}
	return root
}

// factChecker is a healthy log of one fact-checker root run, which has no
// subagents and so keeps its budget in its log, as the node writes it:
// revision 1 reserves the first step, each response's commit charges its
// tokens, the commit of a call's result that ends the response's calls
// reserves the next step. Hooks change it along the way.
type factChecker struct {
	key        string
	leaves     bool // revision 3 carries no totals
	joins      bool // revision 1 carries no totals
	decreases  bool // revision 3 carries fewer steps than revision 2
	chargeLate bool // the first response's tokens are charged by the commit after it
	budget     *events.RunBudget
}

func (h factChecker) write(b *logBuilder) (root string) {
	root = "f-" + h.key
	sess := "sf-" + h.key
	claim, _ := json.Marshal(map[string]string{"claim": chaos.Message(h.key)})
	b.created(events.Run{RunID: root, SessionID: sess, Agent: "fact-checker", RootRunID: root, Message: string(claim), Budget: h.budget})
	b.lease(sess, root, 1)
	usage := &model.Usage{InputTokens: 10, OutputTokens: 5}
	commits := []struct {
		cp runtime.Checkpoint
		l  events.Ledger
	}{
		{runtime.Checkpoint{Phase: runtime.PhaseModel}, events.Ledger{Steps: 1}},
		{runtime.Checkpoint{Phase: runtime.PhaseCalls, Usage: usage, Calls: []runtime.CallRecord{runJS("fc-record", runtime.CallPending)}, Append: []model.Message{{ID: "m-fc1", Role: model.RoleAssistant}}}, events.Ledger{Steps: 1, InputTokens: 10, OutputTokens: 5}},
		{runtime.Checkpoint{Phase: runtime.PhaseCalls, Calls: []runtime.CallRecord{runJS("fc-record", runtime.CallDispatching)}}, events.Ledger{Steps: 1, InputTokens: 10, OutputTokens: 5}},
		{runtime.Checkpoint{Phase: runtime.PhaseModel, Calls: []runtime.CallRecord{runJS("fc-record", runtime.CallDone)}}, events.Ledger{Steps: 2, InputTokens: 10, OutputTokens: 5}},
		{runtime.Checkpoint{Phase: runtime.PhaseCompleted, Usage: usage, Reply: reply(factOut), Append: []model.Message{{ID: "m-fc2", Role: model.RoleAssistant}}}, events.Ledger{Steps: 2, InputTokens: 20, OutputTokens: 10}},
	}
	if h.decreases {
		commits[2].l.Steps = 0
	}
	if h.chargeLate {
		commits[1].l.InputTokens, commits[1].l.OutputTokens = 0, 0
	}
	for i, c := range commits {
		rev := int64(i + 1)
		if h.leaves && rev == 3 || h.joins && rev == 1 {
			b.commit(sess, root, rev, 1, c.cp)
			continue
		}
		b.ledgerCommit(sess, root, rev, 1, c.cp, c.l)
	}
	return root
}

func rules(rep *chaos.Report) []chaos.Rule {
	var out []chaos.Rule
	for _, v := range rep.Violations {
		if !slices.Contains(out, v.Kind) {
			out = append(out, v.Kind)
		}
	}
	slices.Sort(out)
	return out
}

// Each thing the audit must catch, in a log that is otherwise healthy: the
// audit reports exactly that rule (and a clean log none).
func TestAuditFindsEachViolation(t *testing.T) {
	tests := []struct {
		name string
		h    researcher
		// subs changes the client's submissions (the key "a" was sent and
		// acknowledged as r-a by default).
		subs  func(root string) []chaos.Submission
		extra func(b *logBuilder)
		// fc, when set, adds a fact-checker root with the key "f", sent
		// and acknowledged.
		fc      *factChecker
		want    []chaos.Rule
		unended int
		failed  int
	}{
		{name: "clean", want: nil},
		{name: "revision appended twice", h: researcher{dupRevision: true}, want: []chaos.Rule{chaos.RevisionTwice}},
		{name: "revision skipped", h: researcher{gap: true}, want: []chaos.Rule{chaos.RevisionGap}},
		{name: "commit under a superseded lease", h: researcher{staleCommit: true}, want: []chaos.Rule{chaos.SupersededLease}},
		{name: "run_js dispatched twice", h: researcher{secondDispatch: true}, want: []chaos.Rule{chaos.RunJSTwice}},
		{name: "run_js result from a later attempt", h: researcher{crossAttempt: true}, want: []chaos.Rule{chaos.RunJSAcrossAttempt}},
		{name: "parent without a child's result", h: researcher{skipWaitFor: "c2-a"}, want: []chaos.Rule{chaos.ChildResultMissing}},
		{name: "parent with another result than the child's reply", h: researcher{wrongOutput: true}, want: []chaos.Rule{chaos.ChildResultWrong}},
		{name: "child failed", h: researcher{failChild: true}, want: []chaos.Rule{chaos.ChildUnfinished, chaos.Failed}, failed: 1},
		{name: "parent never ends", h: researcher{noEnd: true}, want: nil, unended: 1},
		{name: "parent completed twice", h: researcher{twice: true}, want: []chaos.Rule{chaos.AfterCompletion, chaos.EndedTwice}},
		{name: "one spawn call, two children", h: researcher{thirdChild: true}, want: []chaos.Rule{chaos.SpawnedTwice}},
		{
			name: "one submission, two root runs",
			extra: func(b *logBuilder) {
				b.created(events.Run{RunID: "r-a2", SessionID: "s-a2", Agent: "researcher", RootRunID: "r-a2", Message: chaos.Message("a")})
				b.lease("s-a2", "r-a2", 1)
				b.commit("s-a2", "r-a2", 1, 1, runtime.Checkpoint{Phase: runtime.PhaseCompleted, Reply: reply(`{}`)})
			},
			want: []chaos.Rule{chaos.DuplicateRoot},
		},
		{
			name: "acknowledged run not in the log",
			subs: func(root string) []chaos.Submission {
				return []chaos.Submission{{Key: "a", RunID: root}, {Key: "b", RunID: "r-b"}}
			},
			want: []chaos.Rule{chaos.AckedMissing},
		},
		{
			name: "acknowledged run is not the key's root",
			subs: func(string) []chaos.Submission { return []chaos.Submission{{Key: "a", RunID: "r-other"}} },
			want: []chaos.Rule{chaos.AckedOther},
		},
		{
			name: "unacknowledged submission with its one root run",
			subs: func(string) []chaos.Submission { return []chaos.Submission{{Key: "a"}} },
			want: nil,
		},
		{
			name: "root run with a key never sent",
			subs: func(string) []chaos.Submission { return nil },
			want: []chaos.Rule{chaos.UnknownKey},
		},
		{
			name: "root run without a key",
			extra: func(b *logBuilder) {
				b.created(events.Run{RunID: "r-x", SessionID: "s-x", Agent: "researcher", RootRunID: "r-x", Message: "hello"})
				b.lease("s-x", "r-x", 1)
				b.commit("s-x", "r-x", 1, 1, runtime.Checkpoint{Phase: runtime.PhaseCompleted, Reply: reply(`{}`)})
			},
			want: []chaos.Rule{chaos.NoKey},
		},
		{
			name: "commit with no lease",
			extra: func(b *logBuilder) {
				b.created(events.Run{RunID: "r-y", SessionID: "s-y", Agent: "summarizer", RootRunID: "r-a", ParentRunID: "r-a", ParentCallID: "call-other", Message: "{}"})
				b.commit("s-y", "r-y", 1, 1, runtime.Checkpoint{Phase: runtime.PhaseCompleted, Reply: reply(`{}`)})
			},
			// The parent completed before this child: it lacks its result too.
			want: []chaos.Rule{chaos.ChildResultMissing, chaos.NoLease},
		},
		{
			name: "events of a run never created",
			extra: func(b *logBuilder) {
				b.lease("s-z", "r-z", 1)
				b.commit("s-z", "r-z", 1, 1, runtime.Checkpoint{Phase: runtime.PhaseCompleted, Reply: reply(`{}`)})
			},
			want: []chaos.Rule{chaos.NoCreated},
		},
		{name: "clean, with a run keeping its budget in its log", fc: &factChecker{}, want: nil},
		{name: "budget moved out of the log", fc: &factChecker{leaves: true}, want: []chaos.Rule{chaos.LedgerMode}},
		{name: "budget moved into the log", fc: &factChecker{joins: true}, want: []chaos.Rule{chaos.LedgerMode}},
		{name: "budget totals decreased", fc: &factChecker{decreases: true}, want: []chaos.Rule{chaos.LedgerDecreased}},
		{name: "response tokens charged by a later commit", fc: &factChecker{chargeLate: true}, want: []chaos.Rule{chaos.LedgerTokens}},
		{
			name: "a record that does not decode",
			extra: func(b *logBuilder) {
				b.seq++
				b.recs = append(b.recs, chaos.Record{Seq: b.seq, Subject: events.CheckpointSubject("s", "r", false), Err: errors.New("bad json")})
			},
			want: []chaos.Rule{chaos.Undecodable},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &logBuilder{t: t, at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			tt.h.key = "a"
			root := tt.h.write(b)
			if tt.extra != nil {
				tt.extra(b)
			}
			subs := []chaos.Submission{{Key: "a", RunID: root}}
			if tt.subs != nil {
				subs = tt.subs(root)
			}
			if tt.fc != nil {
				tt.fc.key = "f"
				subs = append(subs, chaos.Submission{Key: "f", RunID: tt.fc.write(b)})
			}
			// The audit sorts by sequence: hand it the log out of order.
			slices.Reverse(b.recs)
			rep := chaos.Audit(b.recs, subs)
			if got := rules(rep); !slices.Equal(got, tt.want) {
				t.Errorf("rules %v, want %v; violations:\n%s", got, tt.want, fmt.Sprint(rep.Violations))
			}
			if len(rep.Unended) != tt.unended || len(rep.Failed) != tt.failed {
				t.Errorf("unended %v, failed %v; want %d and %d", rep.Unended, rep.Failed, tt.unended, tt.failed)
			}
		})
	}
}

// The figures of a healthy log, as the client submits (a fact-checker
// root among researchers): roots, ends, the parents' wakes.
func TestAuditFigures(t *testing.T) {
	b := &logBuilder{t: t, at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var subs []chaos.Submission
	for _, key := range []string{"a", "b", "c"} {
		subs = append(subs, chaos.Submission{Key: key, RunID: researcher{key: key}.write(b)})
	}
	subs = append(subs, chaos.Submission{Key: "d", RunID: factChecker{key: "d"}.write(b)})
	rep := chaos.Audit(b.recs, subs)
	if len(rep.Violations) > 0 || len(rep.Unended) > 0 {
		t.Fatalf("violations %v, unended %v", rep.Violations, rep.Unended)
	}
	// The fact-checker root has no children: a root, and no wake.
	if rep.Roots != 4 || len(rep.Runs) != 10 {
		t.Errorf("roots %d, runs %d; want 4 and 10", rep.Roots, len(rep.Runs))
	}
	// The builder's records are a millisecond apart, and the parent's next
	// commit follows its last child's completion directly.
	if got := rep.WakeLatencies(); !slices.Equal(got, []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}) {
		t.Errorf("wakes %v, want three of 1ms", got)
	}
	if w := rep.Wakes[0]; w.Parent != "r-a" || w.Child != "c2-a" {
		t.Errorf("first wake %+v: want r-a woken by its last child c2-a", w)
	}
	if want := b.recs[len(b.recs)-1].Time; !rep.LastEnd.Equal(want) {
		t.Errorf("last end %v, want %v", rep.LastEnd, want)
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, key := range []string{"1-w0-0", "x"} {
		if got := chaos.KeyOf(chaos.Message(key)); got != key {
			t.Errorf("KeyOf(Message(%q)) = %q", key, got)
		}
	}
	// The client's messages, a fact-checker's JSON included (a negative
	// seed: a replayed one may be).
	agents := map[string]int{}
	for i := range 6 {
		s := newSubmission(-12, 1, i)
		agents[s.agent]++
		if got := chaos.KeyOf(s.message); got != s.key {
			t.Errorf("submission %d (%s): KeyOf(%q) = %q, want %q", i, s.agent, s.message, got, s.key)
		}
		if s.agent != "fact-checker" {
			continue
		}
		var in map[string]any
		if err := json.Unmarshal([]byte(s.message), &in); err != nil || len(in) != 1 || in["claim"] != chaos.Message(s.key) {
			t.Errorf("submission %d: fact-checker message %s (%v), want {\"claim\": Message(key)}", i, s.message, err)
		}
	}
	if agents["researcher"] != 4 || agents["fact-checker"] != 2 {
		t.Errorf("agents of 6 submissions %v, want every third a fact-checker", agents)
	}
	for _, msg := range []string{"", "no key here", "[chaos key unterminated"} {
		if got := chaos.KeyOf(msg); got != "" {
			t.Errorf("KeyOf(%q) = %q, want none", msg, got)
		}
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	tests := []struct {
		name string
		p    float64
		want time.Duration
	}{
		{"p50", 50, 5}, {"p99", 99, 10}, {"max", 100, 10}, {"p10", 10, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := chaos.Percentile(ds, tt.p); got != tt.want {
				t.Errorf("Percentile(%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
	if got := chaos.Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}

func TestQuietWakes(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	wakes := []chaos.Wake{
		{Parent: "before", At: at(0), Latency: 2 * time.Second},         // ends before the window
		{Parent: "overlaps start", At: at(3), Latency: 3 * time.Second}, // 3..6 meets 5..10
		{Parent: "inside", At: at(6), Latency: time.Second},
		{Parent: "overlaps end", At: at(9), Latency: 3 * time.Second},
		{Parent: "after", At: at(11), Latency: 500 * time.Millisecond},
		{Parent: "spans it", At: at(4), Latency: 8 * time.Second},
	}
	got := chaos.Latencies(chaos.Quiet(wakes, []chaos.Window{{From: at(5), To: at(10)}}))
	want := []time.Duration{2 * time.Second, 500 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("Quiet = %v, want %v (the wakes before and after the window)", got, want)
	}
	if got := chaos.Quiet(wakes, nil); len(got) != len(wakes) {
		t.Fatalf("with no window every wake is quiet: %v", got)
	}
}

// AuditSteps: an ended root keeping its budget in its log counts a step
// per response (two here, both in its last commit) with its side entry,
// and no more than its budget.
func TestAuditStepsCountsEachResponse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget *events.RunBudget
		side   *chaos.BudgetEntry
		want   []chaos.Rule
	}{
		{name: "no side entry", want: nil},
		{name: "a reservation of its own beside the log", side: &chaos.BudgetEntry{Steps: 1, InLog: true}, want: nil},
		{name: "within its budget", budget: &events.RunBudget{Steps: 3}, side: &chaos.BudgetEntry{Steps: 1, InLog: true}, want: nil},
		{name: "a step given back that a response took", side: &chaos.BudgetEntry{Steps: -1, InLog: true}, want: []chaos.Rule{chaos.LedgerSteps}},
		{name: "over its budget", budget: &events.RunBudget{Steps: 2}, side: &chaos.BudgetEntry{Steps: 1, InLog: true}, want: []chaos.Rule{chaos.LedgerSteps}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &logBuilder{t: t, at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			root := factChecker{key: "f", budget: tc.budget}.write(b)
			rep := chaos.Audit(b.recs, []chaos.Submission{{Key: "f", RunID: root}})
			if len(rep.Violations) > 0 {
				t.Fatalf("the log alone: %v", rep.Violations)
			}
			if got := rep.LedgerRoots(); !slices.Equal(got, []string{root}) {
				t.Fatalf("ledger roots %v, want [%s]", got, root)
			}
			side := map[string]chaos.BudgetEntry{}
			if tc.side != nil {
				side[root] = *tc.side
			}
			chaos.AuditSteps(rep, side)
			if got := rules(rep); !slices.Equal(got, tc.want) {
				t.Errorf("rules %v, want %v; violations:\n%s", got, tc.want, fmt.Sprint(rep.Violations))
			}
		})
	}
}
