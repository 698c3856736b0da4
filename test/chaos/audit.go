package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// Record is one message of the run log.
type Record struct {
	Seq     uint64
	Subject string
	// Time is the server's timestamp of the message: every process of a
	// test runs on one machine, so it compares with the harness's clock.
	Time  time.Time
	Event events.Envelope
	// Err is set when the message does not decode; Event is then empty.
	Err error
}

// Submission is what the client knows of one submission.
type Submission struct {
	Key string
	// RunID is the run an acknowledgement named; empty when no attempt
	// was acknowledged.
	RunID string
}

// keyTag marks the submission key inside a root run's message: the log
// then says which submission created which root run, whether or not the
// server records idempotency keys.
const keyTag = "[chaos key "

// Message is the user message of the submission with key.
func Message(key string) string {
	return "Is the Great Wall of China visible from orbit? " + keyTag + key + "]"
}

// KeyOf reads the submission key back from a run's message; empty when it
// has none.
func KeyOf(message string) string {
	_, rest, ok := strings.Cut(message, keyTag)
	if !ok {
		return ""
	}
	key, _, ok := strings.Cut(rest, "]")
	if !ok {
		return ""
	}
	return key
}

// Commit is one checkpoint commit of a run.
type Commit struct {
	Seq             uint64
	Time            time.Time
	Revision, Epoch int64
	Done            bool
	// Checkpoint is nil when the payload did not decode (a violation).
	Checkpoint *runtime.Checkpoint
	// Ledger is the run's budget totals the commit carries: set on every
	// commit of a run that keeps its budget in its log (a root with no
	// subagents, on a log of events.LedgerVersion), nil on the others'.
	Ledger *events.Ledger
}

// Run is what the log says of one run.
type Run struct {
	ID, SessionID string
	// Created is nil when the log has no created record of the run.
	Created *events.Run
	Commits []Commit
	// Completed is its completed commit, the first when there are several.
	Completed *Commit
	// Ended is the payload of its first end event (cancelled, failed).
	Ended *events.Ended
	// Ends counts completed commits and end events: exactly 1 when the run
	// finished correctly.
	Ends    int
	EndTime time.Time
	// Records are all of its records, in log order (for diagnosis).
	Records []*Record
}

// Parent is the run's parent's ID, empty for a root.
func (r *Run) Parent() string {
	if r.Created == nil {
		return ""
	}
	return r.Created.ParentRunID
}

// Report is an audited log.
type Report struct {
	Runs map[string]*Run
	// Roots counts root runs (no parent).
	Roots int
	// Violations are none in a correct log.
	Violations []Violation
	// Unended lists the runs with no end yet, sorted.
	Unended []string
	// Failed lists the runs that ended without completing, sorted.
	Failed []string
	// LastEnd is the time of the last end in the log.
	LastEnd time.Time
	// Wakes holds, per parent, the time from its last child's completion
	// to its own next commit, in the order of the parents' IDs.
	Wakes  []Wake
	Events int
}

// Wake is a parent's next commit after its last child's completion.
type Wake struct {
	Parent, Child string
	// At is the child's completion.
	At      time.Time
	Latency time.Duration
}

// WakeLatencies is the latency of every wake.
func (rep *Report) WakeLatencies() []time.Duration { return Latencies(rep.Wakes) }

// Latencies is the latency of each wake.
func Latencies(wakes []Wake) []time.Duration {
	out := make([]time.Duration, len(wakes))
	for i, w := range wakes {
		out[i] = w.Latency
	}
	return out
}

// Window is a stretch of time in which a fault, or the recovery from it,
// was under way.
type Window struct{ From, To time.Time }

// Quiet returns the wakes whose whole span, from the child's completion
// to the parent's next commit, meets no window: the wakes the bound on
// wake latency outside outages speaks of.
func Quiet(wakes []Wake, windows []Window) []Wake {
	var out []Wake
	for _, w := range wakes {
		end := w.At.Add(w.Latency)
		quiet := true
		for _, win := range windows {
			if !end.Before(win.From) && !w.At.After(win.To) {
				quiet = false
				break
			}
		}
		if quiet {
			out = append(out, w)
		}
	}
	return out
}

// Violation is one thing a correct log never shows.
type Violation struct {
	Kind Rule
	// Run is the run it concerns; empty for a record that does not decode.
	Run string
	// Text says what happened, naming the runs, revisions and sequences.
	Text string
}

func (v Violation) String() string { return v.Text }

// Rule names what a violation breaks.
type Rule string

// The rules of the audit.
const (
	Undecodable        Rule = "undecodable"           // a record or payload does not decode
	CreatedTwice       Rule = "created-twice"         // two created records of one run
	NoCreated          Rule = "no-created"            // events of a run with no created record
	LeaseOrder         Rule = "lease-order"           // a lease epoch not above the previous one
	RevisionTwice      Rule = "revision-twice"        // a revision appended twice
	RevisionGap        Rule = "revision-gap"          // revisions not 1, 2, 3, ...
	NoLease            Rule = "no-lease"              // a commit with no lease before it
	SupersededLease    Rule = "superseded-lease"      // a commit under an epoch a later lease superseded
	AfterCompletion    Rule = "after-completion"      // a commit after the run's completed commit
	RunJSTwice         Rule = "run-js-twice"          // a run_js call's predispatch committed twice
	RunJSAcrossAttempt Rule = "run-js-across-attempt" // a run_js result committed by another attempt than its predispatch's
	RunJSNoDispatch    Rule = "run-js-no-dispatch"    // a run_js result with no predispatch commit
	EndedTwice         Rule = "ended-twice"           // more than one end (completion or end event)
	Failed             Rule = "failed"                // a run ended failed or cancelled
	NoParent           Rule = "no-parent"             // a child whose parent the log does not have
	SpawnedTwice       Rule = "spawned-twice"         // one spawn call with several child runs
	ChildUnfinished    Rule = "child-unfinished"      // a parent completed, a child did not
	ChildResultMissing Rule = "child-result-missing"  // a parent completed without a child's result
	ChildResultWrong   Rule = "child-result-wrong"    // a parent's result of a child is not the child's reply
	NoKey              Rule = "no-key"                // a root run with no submission key
	UnknownKey         Rule = "unknown-key"           // a root run with a key the client never sent
	DuplicateRoot      Rule = "duplicate-root"        // one submission, several root runs
	AckedMissing       Rule = "acked-missing"         // an acknowledged run the log does not have
	AckedOther         Rule = "acked-other"           // an acknowledged run that is not the key's root run
	LedgerMode         Rule = "ledger-mode"           // a run's commits switch where its budget is kept
	LedgerDecreased    Rule = "ledger-decreased"      // a commit's budget totals below the commit's before
	LedgerTokens       Rule = "ledger-tokens"         // a commit's budget totals short of the tokens its run's responses reported
	LedgerSteps        Rule = "ledger-steps"          // an ended run's steps (log and side entry) short of its responses, or over its budget
)

func (rep *Report) violate(rule Rule, run, format string, args ...any) {
	rep.Violations = append(rep.Violations, Violation{Kind: rule, Run: run, Text: fmt.Sprintf(format, args...)})
}

// callTrack follows one run_js call through a run's commits.
type callTrack struct {
	state      runtime.CallState
	dispatches int
	epoch      int64 // of its predispatch commit
}

// Audit checks records (a whole log, any order) against the client's
// submissions. It is a pure function: everything it needs is in its
// arguments.
func Audit(records []Record, subs []Submission) *Report {
	rep := &Report{Runs: map[string]*Run{}, Events: len(records)}
	sorted := make([]*Record, len(records))
	for i := range records {
		sorted[i] = &records[i]
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Seq < sorted[j].Seq })

	runOf := func(session, id string) *Run {
		r := rep.Runs[id]
		if r == nil {
			r = &Run{ID: id, SessionID: session}
			rep.Runs[id] = r
		}
		return r
	}
	leases := map[string][]int64{}              // run -> epochs in log order
	calls := map[string]map[string]*callTrack{} // run -> run_js call -> track
	// Commits list a response's calls once and then their changes: each is
	// made whole on the revision before, which also proves the chain.
	folder := events.NewFolder()
	for _, rec := range sorted {
		if rec.Err != nil {
			rep.violate(Undecodable, "", "seq %d on %s does not decode: %v", rec.Seq, rec.Subject, rec.Err)
			continue
		}
		ev := rec.Event
		if ev.RunID == "" || !strings.Contains(rec.Subject, ".run.") {
			continue
		}
		r := runOf(ev.SessionID, ev.RunID)
		r.Records = append(r.Records, rec)
		switch ev.Type {
		case events.RunCreated:
			var created events.Run
			if err := ev.Payload(&created); err != nil {
				rep.violate(Undecodable, r.ID, "run %s: created record at seq %d does not decode: %v", r.ID, rec.Seq, err)
				continue
			}
			if r.Created != nil {
				rep.violate(CreatedTwice, r.ID, "run %s: created twice (seq %d)", r.ID, rec.Seq)
				continue
			}
			r.Created = &created
		case events.LeaseAcquired:
			var l events.Lease
			if err := ev.Payload(&l); err != nil {
				rep.violate(Undecodable, r.ID, "run %s: lease at seq %d does not decode: %v", r.ID, rec.Seq, err)
				continue
			}
			if prev := leases[r.ID]; len(prev) > 0 && l.Epoch <= prev[len(prev)-1] {
				rep.violate(LeaseOrder, r.ID, "run %s: lease epoch %d acquired after epoch %d (seq %d)", r.ID, l.Epoch, prev[len(prev)-1], rec.Seq)
			}
			leases[r.ID] = append(leases[r.ID], l.Epoch)
		case events.CheckpointCommitted:
			c := Commit{Seq: rec.Seq, Time: rec.Time, Revision: ev.Revision, Epoch: ev.Epoch, Done: isDone(rec.Subject)}
			payload, err := events.DecodeCheckpoint(ev)
			var whole *runtime.Checkpoint
			if err == nil {
				c.Ledger = payload.Ledger
				whole, err = folder.Whole(r.ID, payload)
			}
			if err != nil {
				rep.violate(Undecodable, r.ID, "run %s: revision %d (seq %d) does not decode: %v", r.ID, ev.Revision, rec.Seq, err)
			} else {
				c.Checkpoint = whole
			}
			auditCommit(rep, r, c, leases[r.ID], calls)
			r.Commits = append(r.Commits, c)
			if c.Done {
				r.Ends++
				if r.Completed == nil {
					r.Completed = &r.Commits[len(r.Commits)-1]
					r.EndTime = rec.Time
				}
			}
		case events.RunEnded:
			var end events.Ended
			if err := ev.Payload(&end); err != nil {
				rep.violate(Undecodable, r.ID, "run %s: end event at seq %d does not decode: %v", r.ID, rec.Seq, err)
			}
			r.Ends++
			if r.Ended == nil {
				r.Ended = &end
				if r.Completed == nil {
					r.EndTime = rec.Time
				}
			}
		}
	}
	// r.Completed points into r.Commits, which later appends may have
	// moved: point it at the final slice.
	for _, r := range rep.Runs {
		for i := range r.Commits {
			if r.Commits[i].Done {
				r.Completed = &r.Commits[i]
				break
			}
		}
	}

	ids := make([]string, 0, len(rep.Runs))
	for id := range rep.Runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := rep.Runs[id]
		if r.Created == nil {
			rep.violate(NoCreated, id, "run %s has events but no created record", id)
		}
		switch {
		case r.Ends == 0:
			rep.Unended = append(rep.Unended, id)
		case r.Ends > 1:
			rep.violate(EndedTwice, id, "run %s ended %d times (a completion and/or end events)", id, r.Ends)
		}
		if r.Ended != nil {
			rep.Failed = append(rep.Failed, id)
			rep.violate(Failed, id, "run %s ended %s: %s", id, r.Ended.Status, r.Ended.Reason)
		}
		if r.Ends > 0 && r.EndTime.After(rep.LastEnd) {
			rep.LastEnd = r.EndTime
		}
		auditLedger(rep, r)
	}
	auditChildren(rep, ids)
	auditSubmissions(rep, ids, subs)
	return rep
}

// auditCommit checks one commit against the run's commits so far: the
// revisions advance by exactly one, the commit's epoch holds the latest
// lease, nothing follows the completion, and a run_js call is dispatched
// at most once, its result committed by the attempt that dispatched it.
func auditCommit(rep *Report, r *Run, c Commit, leases []int64, calls map[string]map[string]*callTrack) {
	want := int64(1)
	if n := len(r.Commits); n > 0 {
		want = r.Commits[n-1].Revision + 1
	}
	if c.Revision != want {
		seen := false
		for _, p := range r.Commits {
			seen = seen || p.Revision == c.Revision
		}
		if seen {
			rep.violate(RevisionTwice, r.ID, "run %s: revision %d appended twice (seq %d)", r.ID, c.Revision, c.Seq)
		} else {
			rep.violate(RevisionGap, r.ID, "run %s: revision %d follows revision %d (seq %d): revisions not contiguous", r.ID, c.Revision, want-1, c.Seq)
		}
	}
	switch n := len(leases); {
	case n == 0:
		rep.violate(NoLease, r.ID, "run %s: revision %d committed under epoch %d with no lease in the log (seq %d)", r.ID, c.Revision, c.Epoch, c.Seq)
	case leases[n-1] != c.Epoch:
		rep.violate(SupersededLease, r.ID, "run %s: revision %d committed under epoch %d after epoch %d took the lease (seq %d)", r.ID, c.Revision, c.Epoch, leases[n-1], c.Seq)
	}
	if r.Completed != nil {
		rep.violate(AfterCompletion, r.ID, "run %s: revision %d committed after its completion at revision %d (seq %d)", r.ID, c.Revision, r.Completed.Revision, c.Seq)
	}
	if c.Checkpoint == nil {
		return
	}
	tracks := calls[r.ID]
	if tracks == nil {
		tracks = map[string]*callTrack{}
		calls[r.ID] = tracks
	}
	for _, call := range c.Checkpoint.Calls {
		if call.Name != jstool.Name {
			continue
		}
		t := tracks[call.ID]
		if t == nil {
			t = &callTrack{}
			tracks[call.ID] = t
		}
		switch {
		case call.State == runtime.CallDispatching && t.state != runtime.CallDispatching:
			t.dispatches++
			t.epoch = c.Epoch
			if t.dispatches == 2 {
				rep.violate(RunJSTwice, r.ID, "run %s: run_js call %s dispatched twice (the second predispatch at revision %d, seq %d)", r.ID, call.ID, c.Revision, c.Seq)
			}
		case call.State == runtime.CallDone && t.state != runtime.CallDone:
			// A script's result is committed by the attempt that ran it; an
			// attempt that finds the call dispatching answers unknown.
			if t.dispatches == 0 {
				rep.violate(RunJSNoDispatch, r.ID, "run %s: run_js call %s has a result (revision %d) but no predispatch commit", r.ID, call.ID, c.Revision)
			} else if c.Epoch != t.epoch {
				rep.violate(RunJSAcrossAttempt, r.ID, "run %s: run_js call %s dispatched under epoch %d, its result committed under epoch %d (revision %d): the script ran in a later attempt", r.ID, call.ID, t.epoch, c.Epoch, c.Revision)
			}
		}
		t.state = call.State
	}
}

// auditLedger checks the budget a run keeps in its log (Commit.Ledger),
// which the budgets bucket's side entry completes and nothing else
// checks. Its first commit says where the run keeps it, and the run keeps
// it there: the node reads the run's totals as its last commit's plus its
// side entry's, which adds up only when every commit carries them, or
// none does. Each commit's totals are the previous commit's plus what it
// charged, so they never decrease. And the tokens a response reported are
// charged by that response's own commit, so every commit's totals hold
// the tokens of the run's responses so far (at least: a commit also
// carries tokens reported outside a response, such as a compaction's).
func auditLedger(rep *Report, r *Run) {
	var first *Commit
	var prev *events.Ledger
	var in, out int64 // the tokens of the run's responses so far
	for i := range r.Commits {
		c := &r.Commits[i]
		if c.Checkpoint == nil {
			continue // undecodable, reported already
		}
		if first == nil {
			first = c
		}
		if (c.Ledger != nil) != (first.Ledger != nil) {
			rep.violate(LedgerMode, r.ID, "run %s: its first commit (revision %d, seq %d) carries %s, revision %d (seq %d) %s: its budget moved between its log and the budgets bucket",
				r.ID, first.Revision, first.Seq, totalsOrNone(first.Ledger), c.Revision, c.Seq, totalsOrNone(c.Ledger))
			continue
		}
		if c.Ledger == nil {
			continue
		}
		if u := c.Checkpoint.Usage; u != nil {
			in += u.InputTokens
			out += u.OutputTokens
		}
		l := *c.Ledger
		if prev != nil && (l.Steps < prev.Steps || l.InputTokens < prev.InputTokens || l.OutputTokens < prev.OutputTokens) {
			rep.violate(LedgerDecreased, r.ID, "run %s: revision %d (seq %d) carries budget totals %s, below the previous commit's %s",
				r.ID, c.Revision, c.Seq, totals(l), totals(*prev))
		}
		if l.InputTokens < in || l.OutputTokens < out {
			rep.violate(LedgerTokens, r.ID, "run %s: revision %d (seq %d) carries budget totals %s, short of the %d input and %d output tokens its responses reported up to it",
				r.ID, c.Revision, c.Seq, totals(l), in, out)
		}
		prev = &l
	}
}

// BudgetEntry is what the audit reads of a root's entry in the budgets
// bucket (the node's format, docs/events.md): for a root that keeps its
// budget in its log, the side entry of what its commits did not carry (a
// reservation of its own, a step given back, negative).
type BudgetEntry struct {
	Steps        int   `json:"steps"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	InLog        bool  `json:"in_log"`
}

// LedgerRoots lists the ended roots that keep their budget in their log,
// sorted: the ones AuditSteps reads a side entry of.
func (rep *Report) LedgerRoots() []string {
	var out []string
	for _, id := range sortedKeys(rep.Runs) {
		r := rep.Runs[id]
		if r.Created != nil && r.Parent() == "" && r.Ends > 0 && len(r.Commits) > 0 && r.Commits[len(r.Commits)-1].Ledger != nil {
			out = append(out, id)
		}
	}
	return out
}

// AuditSteps checks the step accounting of the ended roots that keep
// their budget in their log, with their entries in the budgets bucket
// (side, by root; a missing one is none): the steps of the last commit
// and the side entry together, the run's total as the node reports it,
// count at least one step per response the log holds (C24: every model
// request reserved one first, and only a step not taken is given back)
// and at most the run's step budget. It is a pure function, like Audit.
func AuditSteps(rep *Report, side map[string]BudgetEntry) {
	for _, id := range rep.LedgerRoots() {
		r := rep.Runs[id]
		responses := 0
		for _, c := range r.Commits {
			if c.Checkpoint != nil && slices.ContainsFunc(c.Checkpoint.Append, func(m model.Message) bool { return m.Role == model.RoleAssistant }) {
				responses++
			}
		}
		last := r.Commits[len(r.Commits)-1].Ledger
		steps := last.Steps + side[id].Steps
		if steps < responses {
			rep.violate(LedgerSteps, id, "run %s: %d steps counted (%d in its last commit, %d beside the log) for the %d responses its log holds",
				id, steps, last.Steps, side[id].Steps, responses)
		}
		if b := r.Created.Budget; b != nil && b.Steps > 0 && steps > b.Steps {
			rep.violate(LedgerSteps, id, "run %s: %d steps counted (%d in its last commit, %d beside the log), over its budget of %d",
				id, steps, last.Steps, side[id].Steps, b.Steps)
		}
	}
}

func totalsOrNone(l *events.Ledger) string {
	if l == nil {
		return "no budget totals"
	}
	return "budget totals " + totals(*l)
}

func totals(l events.Ledger) string {
	return fmt.Sprintf("(%d steps, %d input and %d output tokens)", l.Steps, l.InputTokens, l.OutputTokens)
}

// auditChildren checks that every parent's completion holds all its
// children's results (the wait_calls results in its transcript) and
// measures each parent's wake: its next commit after its last child's
// completion.
func auditChildren(rep *Report, ids []string) {
	children := map[string][]*Run{}
	for _, id := range ids {
		r := rep.Runs[id]
		if p := r.Parent(); p != "" {
			children[p] = append(children[p], r)
		}
	}
	for _, pid := range sortedKeys(children) {
		kids := children[pid]
		p := rep.Runs[pid]
		if p == nil || p.Created == nil {
			rep.violate(NoParent, kids[0].ID, "run %s names parent %s, which the log does not have", kids[0].ID, pid)
			continue
		}
		byCall := map[string][]string{}
		for _, k := range kids {
			byCall[k.Created.ParentCallID] = append(byCall[k.Created.ParentCallID], k.ID)
		}
		for _, call := range sortedKeys(byCall) {
			if runs := byCall[call]; len(runs) > 1 {
				rep.violate(SpawnedTwice, pid, "run %s: call %s spawned %d children: %s", pid, call, len(runs), strings.Join(runs, ", "))
			}
		}
		if wake, ok := wakeOf(p, kids); ok {
			rep.Wakes = append(rep.Wakes, wake)
		}
		if p.Completed == nil {
			continue
		}
		results, waitErrors := waitResults(p)
		for _, k := range kids {
			info, ok := results[k.ID]
			switch {
			case k.Completed == nil:
				rep.violate(ChildUnfinished, pid, "run %s completed, but its child %s (call %s) did not complete", pid, k.ID, k.Created.ParentCallID)
			case !ok:
				rep.violate(ChildResultMissing, pid, "run %s completed without the result of its child %s (call %s)%s", pid, k.ID, k.Created.ParentCallID, waitErrors)
			case info.Status != runtime.StatusCompleted || info.Reply == nil:
				rep.violate(ChildResultMissing, pid, "run %s completed with child %s (call %s) reported %s%s", pid, k.ID, k.Created.ParentCallID, info.Status, waitErrors)
			case k.Completed.Checkpoint != nil && k.Completed.Checkpoint.Reply != nil && !jsonEqual(info.Reply.Output, k.Completed.Checkpoint.Reply.Output):
				rep.violate(ChildResultWrong, pid, "run %s completed with a result of child %s (call %s) that is not the child's reply: %s, the child's %s", pid, k.ID, k.Created.ParentCallID, info.Reply.Output, k.Completed.Checkpoint.Reply.Output)
			}
		}
	}
}

// waitResults collects the children reported by the wait_calls results in
// a run's transcript, by run ID, and describes any wait that failed.
func waitResults(r *Run) (map[string]runtime.CallInfo, string) {
	out := map[string]runtime.CallInfo{}
	var failed []string
	for _, c := range r.Commits {
		if c.Checkpoint == nil {
			continue
		}
		for _, m := range c.Checkpoint.Append {
			if m.Role != model.RoleTool {
				continue
			}
			for _, part := range m.Parts {
				res := part.ToolResult
				if res == nil || res.Name != runtime.ToolWait {
					continue
				}
				var wr runtime.WaitResult
				if res.IsError || json.Unmarshal([]byte(res.Content), &wr) != nil {
					failed = append(failed, fmt.Sprintf("%q", res.Content))
					continue
				}
				if wr.TimedOut {
					failed = append(failed, "a wait timed out")
				}
				for _, info := range wr.Calls {
					out[info.RunID] = info
				}
			}
		}
	}
	if len(failed) == 0 {
		return out, ""
	}
	return out, "; its waits answered: " + strings.Join(failed, "; ")
}

// wakeOf is the time from the last completion among kids to the parent's
// next commit; false when some child has not completed or the parent has
// not committed since.
func wakeOf(p *Run, kids []*Run) (Wake, bool) {
	var last *Run
	for _, k := range kids {
		if k.Completed == nil {
			return Wake{}, false
		}
		if last == nil || k.Completed.Seq > last.Completed.Seq {
			last = k
		}
	}
	done := last.Completed
	for _, c := range p.Commits {
		if c.Seq > done.Seq {
			return Wake{Parent: p.ID, Child: last.ID, At: done.Time, Latency: c.Time.Sub(done.Time)}, true
		}
	}
	return Wake{}, false
}

// auditSubmissions checks that every key the client sent names at most one
// root run, and that an acknowledged key names exactly the acknowledged
// one.
func auditSubmissions(rep *Report, ids []string, subs []Submission) {
	byKey := map[string][]string{}
	for _, id := range ids {
		r := rep.Runs[id]
		if r.Created == nil || r.Created.ParentRunID != "" {
			continue
		}
		rep.Roots++
		key := KeyOf(r.Created.Message)
		if key == "" {
			rep.violate(NoKey, id, "root run %s carries no submission key (message %q)", id, r.Created.Message)
			continue
		}
		byKey[key] = append(byKey[key], id)
	}
	sent := map[string]Submission{}
	for _, s := range subs {
		sent[s.Key] = s
	}
	for _, key := range sortedKeys(byKey) {
		runs := byKey[key]
		if _, ok := sent[key]; !ok {
			rep.violate(UnknownKey, runs[0], "root run(s) %s carry key %s, which the client never sent", strings.Join(runs, ", "), key)
		}
		if len(runs) > 1 {
			rep.violate(DuplicateRoot, runs[0], "submission %s created %d root runs: %s", key, len(runs), strings.Join(runs, ", "))
		}
	}
	for _, s := range subs {
		if s.RunID == "" {
			continue
		}
		runs := byKey[s.Key]
		switch {
		case len(runs) == 0:
			rep.violate(AckedMissing, s.RunID, "submission %s was acknowledged as run %s, which the log does not have", s.Key, s.RunID)
		case len(runs) == 1 && runs[0] != s.RunID:
			rep.violate(AckedOther, s.RunID, "submission %s was acknowledged as run %s, but its root run in the log is %s", s.Key, s.RunID, runs[0])
		}
	}
}

// Describe is a run's last records, one line each, for a report on a
// stuck or failed run.
func (rep *Report) Describe(id string, last int) string {
	r := rep.Runs[id]
	if r == nil {
		return "not in the log"
	}
	var b strings.Builder
	if r.Created != nil {
		fmt.Fprintf(&b, "%s run, parent %q, call %q; %d records, last %d:\n", r.Created.Agent, r.Created.ParentRunID, r.Created.ParentCallID, len(r.Records), min(last, len(r.Records)))
	}
	for _, rec := range r.Records[max(0, len(r.Records)-last):] {
		ev := rec.Event
		fmt.Fprintf(&b, "  seq %d %s %s rev %d epoch %d", rec.Seq, rec.Time.Format("15:04:05.000"), strings.TrimPrefix(string(ev.Type), "cairn."), ev.Revision, ev.Epoch)
		switch ev.Type {
		case events.CheckpointCommitted:
			var p events.Checkpoint
			if ev.Payload(&p) == nil {
				fmt.Fprintf(&b, " phase %s", p.Checkpoint.Phase)
				for _, c := range p.Checkpoint.Calls {
					fmt.Fprintf(&b, " %s(%s)=%s", c.Name, c.ID, c.State)
				}
				if p.Ledger != nil {
					fmt.Fprintf(&b, " ledger %s", totals(*p.Ledger))
				}
			}
		case events.LeaseAcquired:
			var l events.Lease
			if ev.Payload(&l) == nil {
				fmt.Fprintf(&b, " holder %s", l.Holder)
			}
		case events.RunEnded:
			fmt.Fprintf(&b, " %s", ev.Data)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of ds;
// zero when ds is empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// isDone reports whether subject is a run's completed commit.
func isDone(subject string) bool {
	s, err := events.ParseSubject(subject)
	return err == nil && s.Kind == events.KindDone
}
