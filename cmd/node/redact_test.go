package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
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

// node replay's output is redacted: text line by line as it streams, a
// --json document on its decoded strings (several documents too).
func TestRedactingWriter(t *testing.T) {
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
