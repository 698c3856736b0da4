package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
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
			if s, _ := runtime.NewSecrets(providerKeys()); len(s) != 0 {
				t.Errorf("patterns = %q, want none", s)
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
// redacted, with the provider key, by the node's one redactor.
func TestSecretMCPPlaceholders(t *testing.T) {
	const key = "sk-proj-4TqZ9mVx2Lr8Ws1Nb6Kd"
	t.Setenv("OPENAI_API_KEY", key)
	t.Setenv("ANTHROPIC_API_KEY", "x")
	t.Setenv(routeSecretEnv, "")
	servers := filepath.Join(t.TempDir(), "mcp.yaml")
	if err := os.WriteFile(servers, []byte(`servers:
- {name: gh, url: "http://h", headers: {Authorization: "Bearer ghp_R2d2C3poBb8Yy"}, tools: [t], agents: [a]}
- {name: mem, command: [m], env: {API_KEY: dummy, MEMORY_FILE_PATH: /tmp/m}, tools: [t], agents: [a]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	red := nodeRedactor(nodeOptions{mcpServers: servers, logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if got := red.Redact("a dummy text with ghp_R2d2C3poBb8Yy and " + key); got != "a dummy text with [REDACTED] and [REDACTED]" {
		t.Errorf("Redact = %q", got)
	}
	var warned []string
	for _, rec := range logRecords(t, &logs) {
		warned = append(warned, fmt.Sprint(rec["variable"]))
	}
	if strings.Join(warned, ",") != "ANTHROPIC_API_KEY,mcp server mem env API_KEY" || strings.Contains(logs.String(), "dummy") {
		t.Fatalf("warnings name %v, want ANTHROPIC_API_KEY and the mem server's API_KEY\n%s", warned, logs.String())
	}
}
