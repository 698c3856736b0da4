package main

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/redact/redacttest"
)

// --raw-principals names only principals the node knows.
func TestRawPrincipals(t *testing.T) {
	if got, err := rawPrincipals("auditor", map[string]string{"t1": "alice", "t2": "auditor"}); err != nil || !got["auditor"] || len(got) != 1 {
		t.Fatalf("auditor: %v %v", got, err)
	}
	if _, err := rawPrincipals("alice, mallory", map[string]string{"t1": "alice"}); err == nil || !strings.Contains(err.Error(), `"mallory" is no principal of this node (its principals: alice)`) {
		t.Fatalf("an unknown principal granted: %v", err)
	}
	if got, err := rawPrincipals("local", nil); err != nil || !got["local"] {
		t.Fatalf("local without tokens: %v %v", got, err)
	}
}

// node replay's output is redacted: text as a whole (a secret may hold a
// newline: line by line, as before, it was never found), a --json
// document on its decoded strings (several documents too).
func TestRedactingWriter(t *testing.T) {
	const multiline = "sk-live-first-line\nsecond-line-0123"
	var lines strings.Builder
	w0 := &redactingWriter{w: &lines, red: runtime.Secrets{multiline}}
	_, _ = w0.Write([]byte("rev 1: sk-live-first-line\n"))
	_, _ = w0.Write([]byte("second-line-0123 and on\n"))
	if err := w0.Flush(); err != nil {
		t.Fatal(err)
	}
	if lines.String() != "rev 1: [REDACTED] and on\n" {
		t.Fatalf("a secret across lines: %q", lines.String())
	}
	const secret = `sk-live-0123456789&abc`
	red := runtime.Secrets{secret}
	var text strings.Builder
	w := &redactingWriter{w: &text, red: red}
	_, _ = w.Write([]byte("rev 1: " + secret[:10]))
	_, _ = w.Write([]byte(secret[10:] + "\nrev 2: ok\ntail " + secret))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "0123456789") || strings.Count(text.String(), "[REDACTED]") != 2 || !strings.Contains(text.String(), "rev 2: ok") {
		t.Fatalf("text: %q", text.String())
	}
	var js strings.Builder
	w = &redactingWriter{w: &js, red: red, json: true}
	doc, _ := json.MarshalIndent(map[string]string{"reply": secret}, "", "  ")
	_, _ = w.Write(append(doc, '\n'))
	_, _ = w.Write([]byte(`{"second":"` + secret + `"}` + "\n"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "0123456789") || strings.Count(js.String(), "REDACTED") != 2 {
		t.Fatalf("json: %q", js.String())
	}
}

// TestNodeLogIsRedacted (issue 49): the logger the node's commands build
// redacts every record once the node has registered its secrets, in both
// formats, whatever the value's type and wherever the secret sits (the
// message, an attribute, an error, a group, attributes added with With
// before the redactor existed), escaped as each handler escapes it.
// Before, the node's log was written as it was logged.
func TestNodeLogIsRedacted(t *testing.T) {
	const secret = "sk-proj-\"<&>'\\tail0123\nline2"
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			var out strings.Builder
			logger := (&logOptions{format: format, level: slog.LevelDebug}).logger(&out)
			early := logger.With("config", "key="+secret)
			installLogRedactor(logger, runtime.Secrets{secret}.Compile())
			logger.Info("the key is "+secret, "err", errors.New("refused "+secret), slog.Group("g", "v", secret), "any", map[string]string{"k": secret})
			early.Warn("with")
			if found := redacttest.Find(out.String(), secret); found != "" || strings.Count(out.String(), "[REDACTED]") != 5 {
				t.Fatalf("the log (%s form left):\n%s", found, out.String())
			}
		})
	}
}
