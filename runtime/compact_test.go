package runtime_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
	"github.com/cairn-agents/cairn/store/memory"
)

// longRun is n steps of one run_js each, then a completion.
func longRun(n int) []model.Response {
	steps := make([]model.Response, 0, n+1)
	for i := 0; i < n; i++ {
		steps = append(steps, calls(call(fmt.Sprintf("c%d", i), "run_js", `{"code":"call kv.get {\"key\":\"k\"}"}`)))
	}
	return append(steps, calls(completeOutput("done", "compacted")))
}

// smallWindow makes a host whose model has a small context window and whose
// capability returns big results with a secret in them.
func smallWindow(e *env) {
	e.def.Subagents, e.subs = nil, nil
	e.message = "What is the answer? Log in with s3cr3t."
	e.limits = runtime.ModelLimits{ContextTokens: 2400, OutputTokens: 200}
	e.backend.Results = map[string]string{"kv.get": `{"value":"s3cr3t ` + strings.Repeat("data ", 300) + `"}`}
	e.model.Summarize = func(req model.Request) (model.Response, error) {
		n := strings.Count(req.Messages[0].Text(), "[call ")
		return model.Response{Message: model.TextMessage("", model.RoleAssistant, fmt.Sprintf("Summary: %d calls made, each read key k.", n)), Usage: model.Usage{InputTokens: 100, OutputTokens: 20}}, nil
	}
}

// TestC15_C36_LongRunCompactsAndStaysInsideTheWindow: a run whose
// transcript crosses the window several times completes; no request
// exceeds the window by the estimate; the secret in the tool results never
// reaches the model, the summarizer included; the audit history keeps
// every message.
func TestC15_C36_LongRunCompactsAndStaysInsideTheWindow(t *testing.T) {
	e := newEnv(t, longRun(20)...)
	smallWindow(e)
	e.complete()
	l := session.Limits{ContextTokens: e.limits.ContextTokens, OutputTokens: e.limits.OutputTokens}
	kinds := map[model.Purpose]int{}
	for i, req := range e.model.Requests() {
		kinds[req.Purpose]++
		if got := session.EstimateRequest(req); got > l.ContextTokens-req.MaxOutputTokens-l.Margin() {
			t.Fatalf("request %d (%s) is %d tokens, over the window", i, req.Purpose, got)
		}
		b, _ := json.Marshal(req)
		if strings.Contains(string(b), "s3cr3t") {
			t.Fatalf("request %d (%s) carries the secret", i, req.Purpose)
		}
	}
	s, _ := e.db.Open(t.Context(), e.session, e.run)
	var reasons []string
	for _, c := range s.(*memory.Store).Compactions() {
		reasons = append(reasons, c.Reason)
	}
	joined := strings.Join(reasons, ",")
	if !strings.Contains(joined, "prune") || strings.Count(joined, "summary") < 2 {
		t.Fatalf("compactions = %v, want pruning and repeated summaries", reasons)
	}
	// Compaction requests are budgeted like any other (C24).
	if got, want := e.ctrl.Reserved(), len(e.model.Requests()); got != want {
		t.Fatalf("%d reservations for %d requests (%v)", got, want, kinds)
	}
	if h := e.history(); len(h) != 1+2*21 {
		t.Fatalf("history has %d messages, want every one of the %d", len(h), 1+2*21)
	}
	// The original task survives repeated summaries.
	last := e.model.Requests()[len(e.model.Requests())-1]
	if !strings.Contains(last.Messages[0].Text(), "What is the answer? Log in with [REDACTED].") {
		t.Fatalf("the last window lost the task: %q", last.Messages[0].Text())
	}
}
