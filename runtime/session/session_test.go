package session_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

func user(id, text string) model.Message { return model.TextMessage(id, model.RoleUser, text) }

func assistant(id string, callIDs ...string) model.Message {
	m := model.Message{ID: id, Role: model.RoleAssistant}
	for _, c := range callIDs {
		m.Parts = append(m.Parts, model.Call(c, "run_js", `{"code":"return 1"}`))
	}
	return m
}

func result(id, callID, content string) model.Message {
	return model.Message{ID: id, Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: callID, Name: "run_js", Content: content}}}}
}

// conversation is a task followed by n steps of two calls with big results.
func conversation(n, resultBytes int) []model.Message {
	w := []model.Message{user("u", "the task")}
	for i := 0; i < n; i++ {
		a, b := fmt.Sprintf("c%da", i), fmt.Sprintf("c%db", i)
		w = append(w, assistant(fmt.Sprintf("a%d", i), a, b),
			result(fmt.Sprintf("r%da", i), a, strings.Repeat("é", resultBytes/2)),
			result(fmt.Sprintf("r%db", i), b, strings.Repeat("x", resultBytes)))
	}
	return w
}

func TestEstimateIsDeterministicAndPessimistic(t *testing.T) {
	w := conversation(10, 1000)
	if session.EstimateMessages(w) != session.EstimateMessages(conversation(10, 1000)) {
		t.Fatal("estimate is not deterministic")
	}
	// Four bytes per token: non-ASCII text counts more.
	ascii := session.EstimateMessage(user("a", strings.Repeat("x", 400)))
	multi := session.EstimateMessage(user("a", strings.Repeat("é", 400)))
	if ascii < 100 || multi < 200 {
		t.Fatalf("estimates %d (ascii) %d (é): too optimistic", ascii, multi)
	}
	req := model.Request{System: strings.Repeat("s", 400), Messages: w, Tools: []model.ToolDef{{Name: "t", InputSchema: []byte(`{}`)}}}
	if session.EstimateRequest(req) <= session.EstimateMessages(w)+100 {
		t.Fatal("request estimate ignores system and tools")
	}
}

func TestOverflowsAgainstExplicitLimits(t *testing.T) {
	l := session.Limits{ContextTokens: 1000, OutputTokens: 200}
	if l.Prompt() != 1000-200-64 {
		t.Fatalf("prompt = %d", l.Prompt())
	}
	small := model.Request{Messages: []model.Message{user("u", strings.Repeat("x", 2000))}}
	big := model.Request{Messages: []model.Message{user("u", strings.Repeat("x", 4000))}}
	if session.Overflows(small, l) || !session.Overflows(big, l) {
		t.Fatal("overflow detection wrong")
	}
	if (session.Limits{ContextTokens: 100000, OutputTokens: 1000}).Margin() != 5000 {
		t.Fatal("default margin is 5%")
	}
}

func TestPrune(t *testing.T) {
	w := conversation(6, 2000)
	pruned, changed := session.Prune(w, 1200)
	if !changed {
		t.Fatal("nothing pruned")
	}
	if len(pruned) != len(w) {
		t.Fatal("prune dropped messages")
	}
	cut := 0
	for i := range w {
		if pruned[i].ID != w[i].ID || pruned[i].Role != w[i].Role {
			t.Fatalf("message %d changed identity", i)
		}
		if r := pruned[i].Parts[0].ToolResult; r != nil && strings.Contains(r.Content, "[pruned at compaction:") {
			cut++
			if !strings.Contains(r.Content, "bytes of this tool result were removed") || !strings.HasPrefix(w[i].Parts[0].ToolResult.Content, strings.SplitN(r.Content, "\n", 2)[0]) {
				t.Fatalf("pruned result %q", r.Content)
			}
			if !isValidUTF8(r.Content) {
				t.Fatal("prune split a UTF-8 sequence")
			}
		}
	}
	if cut == 0 || session.EstimateMessages(pruned) >= session.EstimateMessages(w) {
		t.Fatal("prune did not shrink the window")
	}
	// The newest results are protected; the input is not modified.
	if last := pruned[len(pruned)-1].Parts[0].ToolResult.Content; strings.Contains(last, "pruned") {
		t.Fatal("the most recent result was pruned")
	}
	if strings.Contains(w[1+1].Parts[0].ToolResult.Content, "pruned") {
		t.Fatal("Prune modified its input")
	}
	// Idempotent.
	if _, again := session.Prune(pruned, 1200); again {
		t.Fatal("pruning twice changed the window again")
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestSplitKeepsCallsWithResults(t *testing.T) {
	w := conversation(8, 800)
	for _, tail := range []int{0, 50, 300, 700, 1500, 100000} {
		head, rest := session.Split(w, tail)
		if len(head)+len(rest) != len(w) {
			t.Fatalf("tail %d: split lost messages", tail)
		}
		if len(rest) == 0 || rest[0].Role == model.RoleTool {
			t.Fatalf("tail %d: tail starts with %v", tail, rest)
		}
		found := false
		for _, m := range rest {
			found = found || m.ID == "a7"
		}
		if !found {
			t.Fatalf("tail %d: the last assistant message is not in the tail", tail)
		}
		calls := map[string]bool{}
		for _, m := range rest {
			for _, c := range m.ToolCalls() {
				calls[c.ID] = true
			}
			if r := m.Parts[0].ToolResult; r != nil && !calls[r.CallID] {
				t.Fatalf("tail %d: result %s separated from its call", tail, r.CallID)
			}
		}
	}
	if head, _ := session.Split(w[:4], 0); len(head) != 1 {
		t.Fatalf("one step: head %v, want just the task", head)
	}
}

func TestSummaryRequestFitsAndTaskSurvives(t *testing.T) {
	w := conversation(40, 3000)
	l := session.Limits{ContextTokens: 4000, OutputTokens: 500}
	req := session.SummaryRequest(w, l, 500)
	if req.Purpose != model.PurposeCompaction || len(req.Tools) != 0 {
		t.Fatalf("summary request = %+v", req)
	}
	if got := session.EstimateRequest(req); got > l.ContextTokens-500-l.Margin() {
		t.Fatalf("summary request is %d tokens", got)
	}
	text := req.Messages[0].Text()
	if !strings.HasPrefix(text, "## user\nthe task") || !strings.Contains(text, "messages omitted") || !strings.Contains(text, "c39b") {
		t.Fatalf("rendered transcript keeps neither the task nor the latest step:\n%.300s", text)
	}
	c1 := session.Continuation("s1", session.Task(w), "first summary")
	c2 := session.Continuation("s2", session.Task([]model.Message{c1, assistant("a")}), "second summary")
	if session.Task([]model.Message{c2}) != "the task" || !strings.Contains(c2.Text(), "the task") {
		t.Fatalf("the task was lost through two compactions: %q", c2.Text())
	}
}

func BenchmarkEstimateAndOverflow1000(b *testing.B) {
	w := conversation(333, 500)
	req := model.Request{Messages: w}
	l := session.Limits{ContextTokens: 128000, OutputTokens: 4096}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		session.Overflows(req, l)
	}
}
