package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	mcpcaps "github.com/cairn-agents/cairn/capabilities/mcp"
)

// logRecords decodes the JSON log lines in b.
func logRecords(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// TestSecretPlaceholderKeyIsNotAPattern: OPENAI_API_KEY=x (what a local
// OpenAI-compatible server is run with) does not corrupt text, and the node
// warns once, naming OPENAI_API_KEY and not its value; a real-looking key
// is redacted and not warned of.
func TestSecretPlaceholderKeyIsNotAPattern(t *testing.T) {
	for _, v := range []string{"x", "none", "EMPTY", "sk-no-key-required", "dummy", "test", "local"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv("OPENAI_API_KEY", v)
			t.Setenv("ANTHROPIC_API_KEY", "")
			var logs bytes.Buffer
			red := redactor(slog.New(slog.NewJSONHandler(&logs, nil)))
			for _, text := range []string{"Summarize the text.", "Is none of the wall visible?", "A local test, a dummy, EMPTY, sk-no-key-required."} {
				if got := red.Redact(text); got != text {
					t.Errorf("Redact(%q) = %q", text, got)
				}
			}
			if s := secrets(); len(s) != 0 {
				t.Errorf("secrets() = %q, want none", s)
			}
			recs := logRecords(t, &logs)
			if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["variable"] != "OPENAI_API_KEY" {
				t.Fatalf("logs = %v, want one warning naming OPENAI_API_KEY", recs)
			}
			for k, val := range recs[0] {
				if s, ok := val.(string); ok && k != "msg" && k != "reason" && k != "time" && k != "level" && k != "variable" {
					t.Errorf("unexpected attribute %s=%q", k, s)
				}
				if s, _ := val.(string); s == v || (len(v) > 1 && strings.Contains(s, v)) {
					t.Errorf("the warning shows the value: %s=%q", k, s)
				}
			}
		})
	}
}

func TestSecretRealKeyIsRedacted(t *testing.T) {
	const key = "sk-proj-4TqZ9mVx2Lr8Ws1Nb6Kd"
	t.Setenv("OPENAI_API_KEY", key)
	t.Setenv("ANTHROPIC_API_KEY", "")
	var logs bytes.Buffer
	red := redactor(slog.New(slog.NewJSONHandler(&logs, nil)))
	if got := red.Redact("the key is " + key + "."); got != "the key is [REDACTED]." {
		t.Errorf("Redact = %q", got)
	}
	if got := red.Redact("Summarize the text."); got != "Summarize the text." {
		t.Errorf("Redact = %q", got)
	}
	if logs.Len() != 0 {
		t.Errorf("a real key was warned of: %s", logs.String())
	}
}

// TestSecretMCPPlaceholders: an MCP server's placeholder values are not
// patterns and are warned of by server and name; its real token is
// redacted, and the MCP redactor keeps the provider key without warning of
// it again.
func TestSecretMCPPlaceholders(t *testing.T) {
	const key = "sk-proj-4TqZ9mVx2Lr8Ws1Nb6Kd"
	t.Setenv("OPENAI_API_KEY", key)
	t.Setenv("ANTHROPIC_API_KEY", "x")
	cfg := &mcpcaps.Config{Servers: []mcpcaps.ServerConfig{
		{Name: "gh", URL: "http://h", Headers: map[string]string{"Authorization": "Bearer ghp_R2d2C3poBb8Yy"}},
		{Name: "mem", Command: []string{"m"}, Env: map[string]string{"API_KEY": "dummy", "MEMORY_FILE_PATH": "/tmp/m"}},
	}}
	var logs bytes.Buffer
	red := mcpRedactor(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	if got := red.Redact("a dummy text with ghp_R2d2C3poBb8Yy and " + key); got != "a dummy text with [REDACTED] and [REDACTED]" {
		t.Errorf("Redact = %q", got)
	}
	recs := logRecords(t, &logs)
	if len(recs) != 1 || recs[0]["variable"] != "mcp server mem env API_KEY" || strings.Contains(logs.String(), "dummy") {
		t.Fatalf("logs = %v, want one warning naming the mem server's API_KEY", recs)
	}
}
