package runtime_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/runtime/session"
)

// TestC15_C36_LongRunCompactsAndStaysInsideTheWindow: a run whose
// transcript crosses the window several times completes; no request
// exceeds the window by the estimate; the secret in the tool results never
// reaches the model, the summarizer included; the audit history keeps
// every message.
func TestC15_C36_LongRunCompactsAndStaysInsideTheWindow(t *testing.T) {
	e := newEnv(t, runtimetest.LongRun(20)...)
	runtimetest.SmallWindow(e)
	e.Complete()
	l := session.Limits{ContextTokens: e.Limits.ContextTokens, OutputTokens: e.Limits.OutputTokens}
	kinds := map[model.Purpose]int{}
	for i, req := range e.Model.Requests() {
		kinds[req.Purpose]++
		if got := session.EstimateRequest(req); got > l.ContextTokens-req.MaxOutputTokens-l.Margin() {
			t.Fatalf("request %d (%s) is %d tokens, over the window", i, req.Purpose, got)
		}
		b, _ := json.Marshal(req)
		if strings.Contains(string(b), "s3cr3t") {
			t.Fatalf("request %d (%s) carries the secret", i, req.Purpose)
		}
	}
	var reasons []string
	for _, c := range e.Compactions() {
		reasons = append(reasons, c)
	}
	joined := strings.Join(reasons, ",")
	if !strings.Contains(joined, "prune") || strings.Count(joined, "summary") < 2 {
		t.Fatalf("compactions = %v, want pruning and repeated summaries", reasons)
	}
	// Compaction requests are budgeted like any other (C24).
	if got, want := e.Ctrl.Reserved(), len(e.Model.Requests()); got != want {
		t.Fatalf("%d reservations for %d requests (%v)", got, want, kinds)
	}
	if h := e.History(); len(h) != 1+2*21 {
		t.Fatalf("history has %d messages, want every one of the %d", len(h), 1+2*21)
	}
	// The original task survives repeated summaries.
	last := e.Model.Requests()[len(e.Model.Requests())-1]
	if !strings.Contains(last.Messages[0].Text(), "What is the answer? Log in with [REDACTED].") {
		t.Fatalf("the last window lost the task: %q", last.Messages[0].Text())
	}
}
