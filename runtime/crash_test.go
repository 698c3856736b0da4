package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/memory"
)

// scenario is a scripted run for the crash matrix.
type scenario struct {
	name  string
	steps []model.Response
	// budget is the controller's step limit (0: unlimited). With a tight
	// budget a lost response commit ends the run at the gate (C35).
	budget int
	// setup adjusts the host before the first attempt.
	setup func(e *env)
}

func scenarios() []scenario {
	return []scenario{
		{name: "two_run_js_then_complete", steps: []model.Response{
			calls(call("c1", "run_js", `{"code":"call kv.get {\"key\":\"a\"}"}`), call("c2", "run_js", `{"code":"return 2"}`)),
			calls(completeOutput("c3", "done"), call("c4", "run_js", `{"code":"return 3"}`)),
		}},
		{name: "children_spawn_wait_get_cancel_complete", steps: []model.Response{
			calls(call("c1", "spawn_fact_checker", `{"claim":"water is wet"}`), call("c2", "spawn_summarizer", `{"text":"long text"}`)),
			calls(call("c3", "wait_calls", `{"ids":["c1","c2"],"timeout_seconds":600}`)),
			calls(call("c4", "get_calls", `{"ids":["c1"]}`), call("c5", "cancel_calls", `{"ids":["c2"]}`)),
			calls(completeOutput("c6", "checked")),
		}},
		{name: "complete_rejected_then_accepted", steps: []model.Response{
			calls(call("c1", "spawn_summarizer", `{"text":"t"}`)),
			calls(completeOutput("c2", "early"), call("c3", "wait_calls", `{"ids":["c1"]}`), completeOutput("c4", "late")),
		}},
		{name: "needs_input", steps: []model.Response{
			calls(call("c1", "run_js", `{"code":"throw no data"}`)),
			calls(call("c2", "complete", `{"type":"needs_input","question":"Which dataset?"}`)),
		}},
		{name: "budget_runs_out_on_recovery", budget: 2, steps: []model.Response{
			calls(call("c1", "run_js", `{"code":"return 1"}`)),
			calls(completeOutput("c2", "ok")),
		}},
		{name: "compaction_prune_and_summary", steps: longRun(12), setup: smallWindow},
	}
}

// nonRetried are the tools whose interrupted calls become unknown-effect
// notices (C20).
var nonRetried = map[string]bool{"run_js": true, "get_calls": true, "cancel_calls": true}

// TestCrashMatrix fails the i-th store operation, before commit and after
// commit with the acknowledgement lost, for every i, then recovers from
// durable state until the run finishes (C8, C13, C17, C19, C20, C25, C26,
// C28, C29, C35, C7).
func TestCrashMatrix(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			base := newEnv(t, sc.steps...)
			base.ctrl.Steps = sc.budget
			if sc.setup != nil {
				sc.setup(base)
			}
			want, err := base.drive(10, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantHist := base.history()
			wantChildren := base.ctrl.Children()
			wantCompactions := compactions(t, base)
			faultFreeOps := base.db.Ops()
			cases := 0
			for i := 0; ; i++ {
				fired := false
				for _, mode := range []memory.FaultMode{memory.FailBefore, memory.FailAfter} {
					t.Run(fmt.Sprintf("op%02d_%s", i, mode), func(t *testing.T) {
						e := newEnv(t, sc.steps...)
						e.ctrl.Steps = sc.budget
						if sc.setup != nil {
							sc.setup(e)
						}
						hit := false
						e.db.SetFault(func(op memory.Op, index int) memory.FaultMode {
							if index == i {
								hit = true
								return mode
							}
							return memory.NoFault
						})
						res, err := e.drive(20, runtimetest.ErrBudgetExhausted)
						e.db.SetFault(nil) // the checks below read the store
						fired = fired || hit
						cases++
						checkRecovered(t, sc, e, res, err, want, wantHist, wantChildren)
						// C15: a crash around Compact neither repeats a compaction
						// of the same window nor loses one: with the same
						// transcript (no unknown-effect notice made it shorter),
						// the same compactions.
						got := compactions(t, e)
						seen := map[string]bool{}
						for _, c := range strings.Fields(strings.Trim(got, "[]")) {
							if seen[c] {
								t.Fatalf("window compacted twice: %s", got)
							}
							seen[c] = true
						}
						hb, _ := json.Marshal(e.history())
						wb, _ := json.Marshal(wantHist)
						if err == nil && string(hb) == string(wb) && got != wantCompactions {
							t.Fatalf("compactions = %s, want %s", got, wantCompactions)
						}
					})
				}
				if !fired && i >= faultFreeOps {
					break
				}
			}
			t.Logf("%d fault cases over %d fault-free store operations", cases, faultFreeOps)
		})
	}
}

func checkRecovered(t *testing.T, sc scenario, e *env, res *runtime.Result, err error, want *runtime.Result, wantHist []model.Message, wantChildren []string) {
	t.Helper()
	hist := e.history()
	if err != nil {
		// Only a tight budget may stop the run, and then only at the gate:
		// no model request was made without a reservation (C35).
		if sc.budget == 0 || !errors.Is(err, runtimetest.ErrBudgetExhausted) {
			t.Fatalf("run did not finish: %v", err)
		}
		if got := len(e.model.Requests()); got > e.ctrl.Reserved() {
			t.Fatalf("%d model requests for %d reservations", got, e.ctrl.Reserved())
		}
		if len(hist) > len(wantHist) {
			t.Fatalf("stopped run has a longer transcript (%d) than the finished one (%d)", len(hist), len(wantHist))
		}
		wantHist = wantHist[:len(hist)]
	} else {
		gb, _ := json.Marshal(res.Reply)
		wb, _ := json.Marshal(want.Reply)
		if string(gb) != string(wb) {
			t.Fatalf("reply = %s, want %s", gb, wb)
		}
	}
	// The transcript equals the fault-free one except for unknown-effect
	// notices of non-retried calls (C20); IDs match, so nothing was
	// appended twice or lost.
	if len(hist) != len(wantHist) {
		t.Fatalf("transcript has %d messages, want %d\n got %s\nwant %s", len(hist), len(wantHist), dump(hist), dump(wantHist))
	}
	seen := map[string]bool{}
	for k := range hist {
		g, w := hist[k], wantHist[k]
		if seen[g.ID] {
			t.Fatalf("message %s appended twice", g.ID)
		}
		seen[g.ID] = true
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if string(gb) == string(wb) {
			continue
		}
		gr, wr := resultOf(g), resultOf(w)
		if gr == nil || wr == nil || g.ID != w.ID || gr.CallID != wr.CallID || !nonRetried[gr.Name] || !strings.HasPrefix(gr.Content, "Unknown effect:") {
			t.Fatalf("message %d differs beyond an unknown-effect notice:\n got %s\nwant %s", k, gb, wb)
		}
	}
	// Non-retried calls were dispatched at most once per call ID.
	for id, n := range e.execs.ExecutedAll() {
		if n > 1 {
			t.Fatalf("run_js %s executed %d times", id, n)
		}
	}
	for key, n := range e.ctrl.PerCall() {
		if (strings.HasPrefix(key, "Get/") || strings.HasPrefix(key, "Cancel/")) && n > 1 {
			t.Fatalf("%s dispatched %d times", key, n)
		}
	}
	// Idempotent controls were redispatched with the same IDs: the fake
	// controller fails a spawn repeated with other arguments, and no child
	// was started twice.
	if err == nil && fmt.Sprint(e.ctrl.Children()) != fmt.Sprint(wantChildren) {
		t.Fatalf("children = %v, want %v", e.ctrl.Children(), wantChildren)
	}
	if err != nil {
		return
	}
	// C7: reinvoking the completed run touches nothing.
	reqs, ctrlCalls, allocs, execs := len(e.model.Requests()), totalCalls(e.ctrl), e.execs.Allocs(), len(e.execs.ExecutedAll())
	again, err2 := e.attempt()
	if err2 != nil || again.Reply == nil {
		t.Fatalf("reinvoke completed run: %+v, %v", again, err2)
	}
	if len(e.model.Requests()) != reqs || totalCalls(e.ctrl) != ctrlCalls || e.execs.Allocs() != allocs || len(e.execs.ExecutedAll()) != execs {
		t.Fatal("reinvoking a completed run called the model, controller or executor")
	}
}

func totalCalls(c *runtimetest.Controller) int {
	n := 0
	for _, m := range []string{"BeforeModel", "Spawn", "Continue", "Get", "Cancel", "Wait", "Complete"} {
		n += c.Count(m)
	}
	return n
}

func resultOf(m model.Message) *model.ToolResult {
	if len(m.Parts) == 1 {
		return m.Parts[0].ToolResult
	}
	return nil
}

func dump(msgs []model.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  %s %s", m.ID, m.Role)
		for _, p := range m.Parts {
			switch {
			case p.ToolCall != nil:
				fmt.Fprintf(&b, " call(%s %s)", p.ToolCall.ID, p.ToolCall.Name)
			case p.ToolResult != nil:
				c := p.ToolResult.Content
				if len(c) > 40 {
					c = c[:40]
				}
				fmt.Fprintf(&b, " result(%s %q)", p.ToolResult.CallID, c)
			default:
				fmt.Fprintf(&b, " %s", p.Type)
			}
		}
	}
	return b.String()
}

func compactions(t *testing.T, e *env) string {
	t.Helper()
	s, err := e.db.Open(context.Background(), e.session, e.run)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range s.(*memory.Store).Compactions() {
		out = append(out, c.Reason+"@"+c.Through)
	}
	return fmt.Sprint(out)
}
