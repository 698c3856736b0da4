package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/redact/redacttest"
)

// A secret with characters JSON escapes is redacted in a JSON view: before,
// the SSE stream redacted the encoded bytes, where "a&b" is "a\u0026b",
// and leaked it (8 leaks in one run).
func TestRedactJSONSeesDecodedValues(t *testing.T) {
	const secret = `sk-"quoted"&<tag>\back`
	red := runtime.Secrets{secret}
	doc, _ := json.Marshal(map[string]any{
		"reply":  "the key is " + secret + ".",
		"nested": []any{map[string]any{"text": secret, secret: 1}},
		"n":      json.Number("12345678901234567890"),
	})
	if !strings.Contains(string(doc), `\u0026`) {
		t.Fatalf("the document does not escape the secret's characters: %s", doc)
	}
	out := RedactJSON(red, doc)
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("redacted document does not decode: %v: %s", err, out)
	}
	for _, leak := range []string{"quoted", `\u0026`, "back"} {
		if strings.Contains(string(out), leak) {
			t.Fatalf("redacted document still shows %q: %s", leak, out)
		}
	}
	if !strings.Contains(string(out), "12345678901234567890") {
		t.Fatalf("a large number lost its digits: %s", out)
	}
	if got := string(RedactJSON(red, []byte("not json "+secret))); strings.Contains(got, "quoted") {
		t.Fatalf("a body that is not JSON is not redacted: %s", got)
	}
}

// Every run view goes through writeView: the reply of GET /v1/runs/{run},
// the timeline, the transcript and a re-drive's report hold what the run
// saw, and none of them shows a secret the redactor knows, but to a
// principal granted raw values (--raw-principals).
func TestWriteViewRedacts(t *testing.T) {
	const secret = `sk-live-0123456789&abc`
	x := &Server{cfg: Config{Redactor: runtime.Secrets{secret}, Raw: map[string]bool{"auditor": true}}, log: slog.New(slog.DiscardHandler)}
	var seen []string
	h := x.auth(func(w http.ResponseWriter, r *http.Request, _ string) {
		x.writeView(w, r, 200, map[string]any{"reply": map[string]any{"output": map[string]string{"answer": secret}}})
	})
	x.cfg.Tokens = map[string]string{"t1": "alice", "t2": "auditor"}
	for _, tok := range []string{"t1", "t2"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/runs/r1", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		h(rec, req)
		if rec.Code != 200 {
			t.Fatalf("view: %d %s", rec.Code, rec.Body.String())
		}
		seen = append(seen, rec.Body.String())
	}
	if strings.Contains(seen[0], "0123456789") || !strings.Contains(seen[0], "REDACTED") {
		t.Fatalf("alice's view: %s", seen[0])
	}
	if !strings.Contains(seen[1], `sk-live-0123456789\u0026abc`) {
		t.Fatalf("the granted auditor's view: %s", seen[1])
	}

}

// TestRedactJSONByteFields (issue 49): a []byte field (a response's model
// and id, provider metadata) is base64 in a view; bytes that hold a secret
// are redacted as text and encoded again, so the view still decodes, and
// holds neither the secret nor its base64.
func TestRedactJSONByteFields(t *testing.T) {
	const secret = "sk-proj-\"<&>\\tail0123\nline2"
	red := runtime.Secrets{secret}.Compile()
	type message struct {
		Meta map[string][]byte `json:"meta"`
	}
	doc, _ := json.Marshal(message{Meta: map[string][]byte{"openai.model": []byte("m " + secret), "openai.response_id": []byte("chatcmpl-" + secret), "other": []byte("plain bytes")}})
	out := RedactJSON(red, doc)
	var back message
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("the view does not decode: %v\n%s", err, out)
	}
	if got := string(back.Meta["openai.model"]); got != "m [REDACTED]" {
		t.Errorf("model = %q", got)
	}
	if got := string(back.Meta["openai.response_id"]); got != "chatcmpl-[REDACTED]" {
		t.Errorf("id = %q", got)
	}
	if got := string(back.Meta["other"]); got != "plain bytes" {
		t.Errorf("other = %q", got)
	}
	if found := redacttest.Find(string(out), secret); found != "" {
		t.Errorf("the view holds the %s form: %s", found, out)
	}
}
