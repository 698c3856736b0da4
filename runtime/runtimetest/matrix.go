package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/faults"
	"github.com/cairn-agents/cairn/store/storetest"
)

// Scenario is a scripted run for the crash matrix.
type Scenario struct {
	Name  string
	Steps []model.Response
	// Budget is the controller's step limit (0: unlimited). With a tight
	// budget a lost response commit ends the run at the gate (C35).
	Budget int
	// Setup adjusts the host before the first attempt.
	Setup func(h *Host)
}

// Spawns reports whether the scenario's run starts children (spawn_<slug>
// or continue_agent calls): a node keeps such a root run's budget where
// its descendants draw on it too.
func (sc Scenario) Spawns() bool {
	for _, r := range sc.Steps {
		for _, c := range r.Message.ToolCalls() {
			if strings.HasPrefix(c.Name, "spawn_") || c.Name == runtime.ToolContinue {
				return true
			}
		}
	}
	return false
}

// Reporting is a model whose every response reports Usage.
type Reporting struct {
	Model model.Model
	Usage model.Usage
}

// Generate implements model.Model.
func (r Reporting) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	resp, err := r.Model.Generate(ctx, req)
	if resp != nil {
		c := *resp
		c.Usage = r.Usage
		resp = &c
	}
	return resp, err
}

// Scenarios are the crash matrix's standard scenarios.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "two_run_js_then_complete", Steps: []model.Response{
			Calls(Call("c1", "run_js", `{"code":"call kv.get {\"key\":\"a\"}"}`), Call("c2", "run_js", `{"code":"return 2"}`)),
			Calls(CompleteOutput("c3", "done"), Call("c4", "run_js", `{"code":"return 3"}`)),
		}},
		{Name: "children_spawn_wait_get_cancel_complete", Steps: []model.Response{
			Calls(Call("c1", "spawn_fact_checker", `{"claim":"water is wet"}`), Call("c2", "spawn_summarizer", `{"text":"long text"}`)),
			Calls(Call("c3", "wait_calls", `{"ids":["c1","c2"],"timeout_seconds":600}`)),
			Calls(Call("c4", "get_calls", `{"ids":["c1"]}`), Call("c5", "cancel_calls", `{"ids":["c2"]}`)),
			Calls(CompleteOutput("c6", "checked")),
		}},
		{Name: "complete_rejected_then_accepted", Steps: []model.Response{
			Calls(Call("c1", "spawn_summarizer", `{"text":"t"}`)),
			Calls(CompleteOutput("c2", "early"), Call("c3", "wait_calls", `{"ids":["c1"]}`), CompleteOutput("c4", "late")),
		}},
		{Name: "needs_input", Steps: []model.Response{
			Calls(Call("c1", "run_js", `{"code":"throw no data"}`)),
			Calls(Call("c2", "complete", `{"type":"needs_input","question":"Which dataset?"}`)),
		}},
		{Name: "budget_runs_out_on_recovery", Budget: 2, Steps: []model.Response{
			Calls(Call("c1", "run_js", `{"code":"return 1"}`)),
			Calls(CompleteOutput("c2", "ok")),
		}},
		{Name: "compaction_prune_and_summary", Steps: LongRun(12), Setup: SmallWindow},
	}
}

// LongRun is n steps of one run_js each, then a completion.
func LongRun(n int) []model.Response {
	steps := make([]model.Response, 0, n+1)
	for i := 0; i < n; i++ {
		steps = append(steps, Calls(Call(fmt.Sprintf("c%d", i), "run_js", `{"code":"call kv.get {\"key\":\"k\"}"}`)))
	}
	return append(steps, Calls(CompleteOutput("done", "compacted")))
}

// SmallWindow makes a host whose model has a small context window, whose
// capability returns big results and whose task holds a secret.
func SmallWindow(h *Host) {
	h.Def.Subagents, h.Subs = nil, nil
	h.Message = "What is the answer? Log in with s3cr3t."
	h.Limits = runtime.ModelLimits{ContextTokens: 2400, OutputTokens: 200}
	h.Backend.Results = map[string]string{"kv.get": `{"value":"s3cr3t ` + strings.Repeat("data ", 300) + `"}`}
	h.Model.Summarize = func(req model.Request) (model.Response, error) {
		n := strings.Count(req.Messages[0].Text(), "[call ")
		return model.Response{Message: model.TextMessage("", model.RoleAssistant, fmt.Sprintf("Summary: %d calls made, each read key k.", n)), Usage: model.Usage{InputTokens: 100, OutputTokens: 20}}, nil
	}
}

// nonRetried are the tools whose interrupted calls become unknown-effect
// notices (C20).
var nonRetried = map[string]bool{"run_js": true, "get_calls": true, "cancel_calls": true}

// CrashMatrix fails the i-th store operation, before commit and after commit
// with the acknowledgement lost, for every i, then recovers from durable
// state until the run finishes, and checks what the contract promises (C7,
// C8, C13, C15, C17, C19, C20, C25, C26, C28, C29, C35). newOpener returns
// an opener over empty state.
func CrashMatrix(t *testing.T, newOpener func(t *testing.T) storetest.Opener, scenarios []Scenario) {
	CrashMatrixWith(t, newOpener, scenarios, MatrixHooks{})
}

// MatrixHooks adapt the crash matrix to a host's own parts (a node's
// budget, say): each host is adjusted after its scenario's setup, and
// each case checked after the matrix's own checks.
type MatrixHooks struct {
	Setup func(t *testing.T, sc Scenario, h *Host)
	Check func(t *testing.T, sc Scenario, h *Host, err error)
}

// CrashMatrixWith is CrashMatrix with hooks.
func CrashMatrixWith(t *testing.T, newOpener func(t *testing.T) storetest.Opener, scenarios []Scenario, hooks MatrixHooks) {
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			newHost := func(t *testing.T) *Host {
				h := NewHost(t, newOpener(t), sc.Steps...)
				h.Ctrl.Steps = sc.Budget
				if sc.Setup != nil {
					sc.Setup(h)
				}
				if hooks.Setup != nil {
					hooks.Setup(t, sc, h)
				}
				return h
			}
			base := newHost(t)
			want, err := base.Drive(10, nil)
			if err != nil {
				t.Fatal(err)
			}
			if hooks.Check != nil {
				hooks.Check(t, sc, base, nil)
			}
			ref := reference{reply: want, hist: base.History(), children: base.Ctrl.Children(), compactions: fmt.Sprint(base.Compactions())}
			faultFree := base.Faults.Ops()
			cases := 0
			for i := 0; ; i++ {
				fired := false
				for _, mode := range []faults.Mode{faults.Before, faults.After} {
					t.Run(fmt.Sprintf("op%02d_%s", i, mode), func(t *testing.T) {
						h := newHost(t)
						h.Faults.Set(faults.At(i, mode))
						res, err := h.Drive(20, ErrBudgetExhausted)
						fired = fired || h.Faults.Hit()
						h.Faults.Set(nil)
						cases++
						checkRecovered(t, sc, h, res, err, ref)
						if hooks.Check != nil {
							hooks.Check(t, sc, h, err)
						}
					})
				}
				if !fired && i >= faultFree {
					break
				}
			}
			t.Logf("%d fault cases over %d fault-free store operations", cases, faultFree)
		})
	}
}

type reference struct {
	reply       *runtime.Result
	hist        []model.Message
	children    []string
	compactions string
}

func checkRecovered(t *testing.T, sc Scenario, h *Host, res *runtime.Result, err error, ref reference) {
	t.Helper()
	hist := h.History()
	wantHist := ref.hist
	if err != nil {
		// Only a tight budget may stop the run, and then only at the gate:
		// no model request was made without a reservation (C35).
		if sc.Budget == 0 || !errors.Is(err, ErrBudgetExhausted) {
			t.Fatalf("run did not finish: %v", err)
		}
		if got := len(h.Model.Requests()); got > h.Ctrl.Reserved() {
			t.Fatalf("%d model requests for %d reservations", got, h.Ctrl.Reserved())
		}
		if len(hist) > len(wantHist) {
			t.Fatalf("stopped run has a longer transcript (%d) than the finished one (%d)", len(hist), len(wantHist))
		}
		wantHist = wantHist[:len(hist)]
	} else {
		gb, _ := json.Marshal(res.Reply)
		wb, _ := json.Marshal(ref.reply.Reply)
		if string(gb) != string(wb) {
			t.Fatalf("reply = %s, want %s", gb, wb)
		}
	}
	// The transcript equals the fault-free one except for unknown-effect
	// notices of non-retried calls (C20); IDs match, so nothing was
	// appended twice or lost.
	if len(hist) != len(wantHist) {
		t.Fatalf("transcript has %d messages, want %d\n got %s\nwant %s", len(hist), len(wantHist), Dump(hist), Dump(wantHist))
	}
	seen := map[string]bool{}
	identical := true
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
		identical = false
		gr, wr := soleResult(g), soleResult(w)
		if gr == nil || wr == nil || g.ID != w.ID || gr.CallID != wr.CallID || !nonRetried[gr.Name] || !strings.HasPrefix(gr.Content, "Unknown effect:") {
			t.Fatalf("message %d differs beyond an unknown-effect notice:\n got %s\nwant %s", k, gb, wb)
		}
	}
	// Non-retried calls were dispatched at most once per call ID.
	for id, n := range h.Execs.ExecutedAll() {
		if n > 1 {
			t.Fatalf("run_js %s executed %d times", id, n)
		}
	}
	for key, n := range h.Ctrl.PerCall() {
		if (strings.HasPrefix(key, "Get/") || strings.HasPrefix(key, "Cancel/")) && n > 1 {
			t.Fatalf("%s dispatched %d times", key, n)
		}
	}
	// C15: a crash around Compact never compacts the same window twice and,
	// with the same transcript, makes the same compactions.
	comps := h.Compactions()
	dup := map[string]bool{}
	for _, c := range comps {
		if dup[c] {
			t.Fatalf("window compacted twice: %v", comps)
		}
		dup[c] = true
	}
	if err != nil {
		return
	}
	if identical && fmt.Sprint(comps) != ref.compactions {
		t.Fatalf("compactions = %v, want %s", comps, ref.compactions)
	}
	// Idempotent controls were redispatched with the same IDs: the fake
	// controller fails a spawn repeated with other arguments, and no child
	// was started twice (C25, C26).
	if fmt.Sprint(h.Ctrl.Children()) != fmt.Sprint(ref.children) {
		t.Fatalf("children = %v, want %v", h.Ctrl.Children(), ref.children)
	}
	// C7: reinvoking the completed run touches nothing.
	reqs, ctrlCalls, allocs, execs := len(h.Model.Requests()), h.Ctrl.Total(), h.Execs.Allocs(), len(h.Execs.ExecutedAll())
	again, err2 := h.Attempt()
	if err2 != nil || again.Reply == nil {
		t.Fatalf("reinvoke completed run: %+v, %v", again, err2)
	}
	if len(h.Model.Requests()) != reqs || h.Ctrl.Total() != ctrlCalls || h.Execs.Allocs() != allocs || len(h.Execs.ExecutedAll()) != execs {
		t.Fatal("reinvoking a completed run called the model, controller or executor")
	}
}

func soleResult(m model.Message) *model.ToolResult {
	if len(m.Parts) == 1 {
		return m.Parts[0].ToolResult
	}
	return nil
}
