package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/runtime/session"
)

// pruneKeepBytes is how much of a pruned tool result stays readable
// (session's pruneKeepBytes): the cut point.
const pruneKeepBytes = 200

// straddlingSecret is a 24-byte key; secretResult puts it at byte
// secretAt of a tool result's content, across the cut.
const (
	straddlingSecret = "sk-live-4f9c2a7e1b8d6053"
	secretAt         = 190
)

// secretStep is a run_js call whose result holds the secret at byte at of
// its content (a script returns it: what a script returns is committed as
// it is and redacted only on its way to a model), padded to 1,200 bytes.
func secretStep(at int) model.Response {
	value := strings.Repeat("a", at) + straddlingSecret + strings.Repeat(" data", 200)
	code, _ := json.Marshal("return " + mustJSON(value))
	return calls(call("leak", "run_js", fmt.Sprintf(`{"code":%s}`, code)))
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// resultContent is the content of the tool result of call id in h's
// history.
func resultContent(t *testing.T, h *runtimetest.Host, id string) string {
	t.Helper()
	for _, m := range h.History() {
		for _, p := range m.Parts {
			if p.ToolResult != nil && p.ToolResult.CallID == id {
				return p.ToolResult.Content
			}
		}
	}
	t.Fatalf("no tool result of %s in the history", id)
	return ""
}

// TestC36_PruneRedactsBeforeItCuts: a secret in an old tool result that
// straddles the prune cut (24 bytes from byte 190 of the content; the
// first 200 bytes are kept) is redacted whole before the cut: no prefix of
// it of MinSecretBytes or more reaches any model request, the step after
// the pruning as much as a compaction summary request, nor a pruned result
// of a committed window. Before the fix Prune cut first and the redactor, which matches
// the whole secret only, let its first 10 bytes through to every later
// request.
func TestC36_PruneRedactsBeforeItCuts(t *testing.T) {
	// Where does a script's value start in its tool result's content?
	probe := newEnv(t, secretStep(0), calls(completeOutput("done", "x")))
	probe.Redact = runtime.Secrets{} // see the value as committed
	probe.Complete()
	base := strings.Index(resultContent(t, probe, "leak"), straddlingSecret)
	if base < 0 || base > secretAt {
		t.Fatalf("the script's value sits at %d of its tool result", base)
	}

	steps := append([]model.Response{secretStep(secretAt - base)}, runtimetest.LongRun(8)...)
	e := newEnv(t, steps...)
	runtimetest.SmallWindow(e)
	e.Redact = runtime.Secrets{"s3cr3t", straddlingSecret}
	e.Complete()
	content := resultContent(t, e, "leak")
	if at := strings.Index(content, straddlingSecret); at != secretAt || len(content) <= 2*pruneKeepBytes {
		t.Fatalf("the secret sits at %d of a %d-byte result, want %d of one above %d bytes", at, len(content), secretAt, 2*pruneKeepBytes)
	}
	if !strings.Contains(strings.Join(e.Compactions(), ","), "prune") {
		t.Fatalf("compactions = %v, want a pruning", e.Compactions())
	}
	leaks := func(s string) string {
		for n := len(straddlingSecret); n >= runtime.MinSecretBytes; n-- {
			if strings.Contains(s, straddlingSecret[:n]) {
				return straddlingSecret[:n]
			}
		}
		return ""
	}
	pruned := false
	for i, req := range e.Model.Requests() {
		b, _ := json.Marshal(req)
		if p := leaks(string(b)); p != "" {
			t.Fatalf("request %d (%s) carries %q, a %d-byte prefix of the secret", i, req.Purpose, p, len(p))
		}
		pruned = pruned || strings.Contains(string(b), "[pruned at compaction:")
	}
	if !pruned {
		t.Fatal("no request carries a pruned tool result")
	}
	st, err := e.Opener.Open(context.Background(), e.Session, e.Run)
	if err != nil {
		t.Fatal(err)
	}
	// The committed window keeps messages as they were (the call that
	// returned the secret holds it whole, redacted on its way to a model),
	// but a pruned result holds what the cut left of the redacted whole.
	for _, c := range st.(interface{ Compactions() []session.Compaction }).Compactions() {
		for _, m := range c.Window {
			for _, p := range m.Parts {
				if r := p.ToolResult; r != nil && r.CallID == "leak" && strings.Contains(r.Content, "[pruned at compaction:") {
					if l := leaks(r.Content); l != "" {
						t.Fatalf("the %s compaction's window carries %q, a %d-byte prefix of the secret", c.Reason, l, len(l))
					}
				}
			}
		}
	}
}
