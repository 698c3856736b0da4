package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// C24, C34, C35 for a root run that keeps its budget in its log (inLog),
// one attempt's operations at a time, as the loop and the node make them:
// its commits (Charge, then Charged when the write landed), the gate
// (reserve), the model wrapper's reports (record) and the attempt's end.
// Each case checks the run's totals (its last commit's and its side
// entry's) and the writes to the budgets bucket: none in steady state.
func TestBudgetInTheLog(t *testing.T) {
	ctx := context.Background()
	u := model.Usage{InputTokens: 10, OutputTokens: 5}
	type op struct {
		do      string
		wantErr bool
	}
	ok := func(do ...string) []op {
		out := make([]op, len(do))
		for i, d := range do {
			out[i] = op{do: d}
		}
		return out
	}
	refused := op{"reserve", true}
	for _, tc := range []struct {
		name   string
		budget runtime.Budget
		ops    []op
		steps  int
		tokens int64
		writes uint64
	}{
		// rev 1 reserves the first step; the response's commit charges its
		// tokens; the last call's result reserves the next step; the
		// completion reserves nothing.
		{"steady state: no write of the budget's own", runtime.Budget{Steps: 5},
			ok("commit-model", "reserve", "response", "commit-calls", "commit-model", "reserve", "response", "commit-done", "end"), 2, 30, 0},
		{"a response with no call goes on", runtime.Budget{Steps: 5},
			ok("commit-model", "reserve", "response", "commit-model", "reserve", "response", "commit-done"), 2, 30, 0},
		{"no budget set", runtime.Budget{},
			ok("commit-model", "reserve", "response", "commit-calls", "commit-model", "reserve"), 2, 15, 0},
		// The gate refuses with no write; the commit reserved nothing.
		{"the last step allowed is not reserved ahead", runtime.Budget{Steps: 1},
			append(ok("commit-model", "reserve", "response", "commit-calls", "commit-model"), refused, op{"end", false}), 1, 15, 0},
		{"spent tokens: nothing ahead, and refused", runtime.Budget{Tokens: 15},
			append(ok("commit-model", "reserve", "response", "commit-calls", "commit-model"), refused), 1, 15, 0},
		{"a passed deadline: nothing reserved by revision 1", runtime.Budget{Steps: 5, Timeout: time.Minute},
			append(ok("later", "commit-model"), refused, op{"end", false}), 0, 0, 0},
		// Refused at the gate, the step reserved ahead is given back when
		// the attempt ends, on the side entry.
		{"a deadline that passed after the reservation ahead", runtime.Budget{Steps: 5, Timeout: time.Minute},
			append(ok("commit-model", "reserve", "response", "commit-calls", "commit-model", "later"), refused, op{"end", false}), 1, 15, 1},
		{"an attempt that ends before its next step gives it back", runtime.Budget{Steps: 5},
			ok("commit-model", "reserve", "response", "commit-calls", "commit-model", "end"), 1, 15, 1},
		// A compaction's request spends the step reserved ahead; the step's
		// own request is reserved on the side entry, with the compaction's
		// tokens.
		{"a compaction's request, then the step's", runtime.Budget{Steps: 5},
			ok("commit-model", "reserve", "compaction", "reserve", "response", "commit-calls", "end"), 2, 30, 1},
		// C35: a crash after the reservation costs the step; the next
		// attempt reserves on the side entry, or stops at the gate.
		{"a crash after the reservation: the next attempt reserves again", runtime.Budget{Steps: 5},
			ok("commit-model", "attempt", "reserve", "response", "commit-calls"), 2, 15, 1},
		{"a crash after the reservation: a spent budget stops at the gate", runtime.Budget{Steps: 1},
			append(ok("commit-model", "attempt"), refused, op{"end", false}), 1, 0, 0},
		{"a step given back, then reserved by the next attempt", runtime.Budget{Steps: 1},
			ok("commit-model", "end", "attempt", "reserve", "response", "commit-calls"), 1, 15, 2},
		// A response whose commit did not land (the attempt lost its lease
		// or its write failed): its tokens are charged when the attempt
		// ends.
		{"tokens of a response whose commit failed", runtime.Budget{Steps: 5},
			ok("commit-model", "reserve", "response", "commit-lost", "end"), 1, 15, 1},
		{"a lost commit reserves nothing", runtime.Budget{Steps: 5},
			ok("commit-model", "reserve", "response", "commit-calls", "commit-model-lost", "reserve"), 2, 15, 1},
		// Tokens counted, not reserved (C34): the response that overshoots
		// is charged, the next step refused.
		{"tokens overshoot, then the gate refuses", runtime.Budget{Tokens: 20},
			append(ok("commit-model", "reserve", "response", "commit-calls", "commit-model", "reserve", "response", "commit-calls", "commit-model"), refused), 2, 30, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			l, kv := testLedger(t, func() time.Time { return now })
			rec := &events.Run{RunID: "root", RootRunID: "root", Budget: l.budgetOf(tc.budget)}
			side := &budgetView{}
			side.set(entryOf(rec.Budget), 0) // as openCreated: a fresh root, no entry
			b := &inLog{l: l, root: "root", limits: entryOf(rec.Budget), side: side}
			var last *events.Ledger
			rev := int64(0)
			commit := func(phase runtime.Phase, done, lands bool) {
				rev++
				cp := &runtime.Checkpoint{Revision: rev, Phase: phase}
				if done {
					cp.Reply = &runtime.Reply{Type: runtime.ReplyOutput}
				}
				c := b.Charge(cp, last)
				if !lands {
					rev--
					return
				}
				b.Charged(cp, c)
				last = c
			}
			for i, o := range tc.ops {
				var err error
				switch o.do {
				case "commit-model":
					commit(runtime.PhaseModel, false, true)
				case "commit-model-lost":
					commit(runtime.PhaseModel, false, false)
				case "commit-calls":
					commit(runtime.PhaseCalls, false, true)
				case "commit-lost":
					commit(runtime.PhaseCalls, false, false)
				case "commit-done":
					commit(runtime.PhaseCompleted, true, true)
				case "reserve":
					err = b.reserve(ctx)
				case "response":
					err = recorder{inLog: b}.RecordResponse(ctx, model.PurposeStep, &model.Response{Usage: u})
				case "compaction":
					err = recorder{inLog: b}.RecordResponse(ctx, model.PurposeCompaction, &model.Response{Usage: u})
				case "end":
					err = b.end(ctx)
				case "attempt": // the next attempt, after a crash: its view read
					side = &budgetView{}
					if _, err = l.deadline(ctx, rec, side); err == nil {
						b = &inLog{l: l, root: "root", limits: entryOf(rec.Budget), side: side}
						if last != nil {
							b.commits = *last
						}
					}
				case "later":
					now = now.Add(time.Hour)
				default:
					t.Fatalf("op %q", o.do)
				}
				if (err != nil) != o.wantErr || (err != nil && !errors.Is(err, ErrBudget)) {
					t.Fatalf("op %d (%s): %v, want an ErrBudget: %v", i, o.do, err, o.wantErr)
				}
			}
			var total budgetEntry
			if last != nil {
				total.UsedSteps, total.InputTokens, total.OutputTokens = last.Steps, last.InputTokens, last.OutputTokens
			}
			if e, err := l.usage(ctx, "root"); err == nil {
				if !e.InLog {
					t.Fatalf("side entry %+v not marked in_log", e)
				}
				total.UsedSteps += e.UsedSteps
				total.InputTokens += e.InputTokens
				total.OutputTokens += e.OutputTokens
			} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatal(err)
			}
			if total.UsedSteps != tc.steps || total.InputTokens+total.OutputTokens != tc.tokens {
				t.Fatalf("totals %+v; want %d steps and %d tokens", total, tc.steps, tc.tokens)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.(interface{ StreamInfo() *jetstream.StreamInfo }).StreamInfo().State.LastSeq; got != tc.writes {
				t.Fatalf("%d writes to the budgets bucket, want %d", got, tc.writes)
			}
		})
	}
}

// Where an attempt keeps its run's budget (keepsInLog): in the log for a
// root with no subagents and a budget in its record, when its log has
// totals already (at any level), or, with no commit yet, at a level that
// writes them and with no whole entry in the bucket from an earlier
// attempt; in the bucket otherwise, and for good once the run has commits
// without totals.
func TestWhereTheBudgetIsKept(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	s, err := cjs.New(ctx, nc, cjs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	solo := &Agent{}
	withSubs := &Agent{Definition: runtime.AgentDefinition{Subagents: []string{"helper"}}}
	budget := &events.RunBudget{Steps: 3}
	root := func(id string) *events.Run { return &events.Run{RunID: id, RootRunID: id, Budget: budget} }
	// A run with commits: with totals, or without (begun in the bucket).
	commit := func(id string, withTotals bool) *cjs.RunStore {
		h, err := s.Open(ctx, "s-"+id, id)
		if err != nil {
			t.Fatal(err)
		}
		rs := h.(*cjs.RunStore)
		if withTotals {
			rs.SetLedger(&inLog{l: &ledger{now: time.Now}, limits: entryOf(budget), side: &budgetView{}})
		}
		cp := &runtime.Checkpoint{Version: 1, Revision: 1, RunKey: id, Phase: runtime.PhaseModel,
			Append: []model.Message{model.TextMessage(id+"-1", model.RoleUser, "go")}}
		if err := rs.SaveCheckpoint(ctx, cp); err != nil {
			t.Fatal(err)
		}
		return rs
	}
	fresh := func(id string) *cjs.RunStore {
		h, err := s.Open(ctx, "s-"+id, id)
		if err != nil {
			t.Fatal(err)
		}
		return h.(*cjs.RunStore)
	}
	view := func(e budgetEntry, rev uint64) *budgetView {
		v := &budgetView{}
		v.set(e, rev)
		return v
	}
	none := view(entryOf(budget), 0)
	whole := view(budgetEntry{Steps: 3, UsedSteps: 1}, 7)
	side := view(budgetEntry{Steps: 3, UsedSteps: -1, InLog: true}, 7)
	for _, tc := range []struct {
		name  string
		rec   *events.Run
		a     *Agent
		rs    *cjs.RunStore
		level int
		side  *budgetView
		want  bool
	}{
		{"a fresh root with no subagents", root("a"), solo, fresh("a"), events.LedgerVersion, none, true},
		{"a fresh root, at level 3", root("b"), solo, fresh("b"), 3, none, false},
		{"a fresh root whose earlier attempt charged a whole entry", root("c"), solo, fresh("c"), events.LedgerVersion, whole, false},
		{"a fresh root with a side entry", root("d"), solo, fresh("d"), events.LedgerVersion, side, true},
		{"a root with subagents", root("e"), withSubs, fresh("e"), events.LedgerVersion, none, false},
		{"a child", &events.Run{RunID: "f", RootRunID: "root", ParentRunID: "root"}, solo, fresh("f"), events.LedgerVersion, none, false},
		{"a root with no budget in its record (a fork)", &events.Run{RunID: "g", RootRunID: "g"}, solo, fresh("g"), events.LedgerVersion, none, false},
		{"a run whose log has totals, at level 3", root("h"), solo, commit("h", true), 3, none, true},
		{"a run begun in the bucket", root("i"), solo, commit("i", false), events.LedgerVersion, none, false},
	} {
		if got := keepsInLog(tc.rec, tc.a, tc.rs, tc.level, tc.side); got != tc.want {
			t.Errorf("%s: keepsInLog = %v, want %v", tc.name, got, tc.want)
		}
	}
}
