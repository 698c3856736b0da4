package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// flakyProvider speaks OpenAI's Chat Completions: its first `fail`
// requests answer 503, every later one completes the run.
type flakyProvider struct {
	fail int32
	hits atomic.Int32
}

func (p *flakyProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	if n := p.hits.Add(1); n <= p.fail {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"message":"overloaded (request %d)","type":"server_error"}}`, n)
		return
	}
	writeChatCall(w, "call-1", "", "complete", `{"type":"output","output":{"answer":"done"}}`, 10, 5)
}

// writeChatCall answers a Chat Completions request with one tool call
// (args: its arguments' JSON text), text (none when empty) and the usage,
// as OpenAI does.
func writeChatCall(w http.ResponseWriter, callID, text, name, args string, in, out int) {
	content := "null"
	if text != "" {
		b, _ := json.Marshal(text)
		content = string(b)
	}
	a, _ := json.Marshal(args)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
		"message":{"role":"assistant","content":%s,"tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]}}],
		"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, content, callID, name, a, in, out, in+out)
}

// chatMessage is a message of a Chat Completions request, as the fake
// providers read it.
type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// chatMessages reads the messages of a Chat Completions request.
func chatMessages(r *http.Request) []chatMessage {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []chatMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	return req.Messages
}

func retryAgent(retry string) string {
	return `slug: flaky
instructions: Answer.
model: openai:m
limits: {context_tokens: 64000, output_tokens: 1024}
output_schema: {type: object, required: [answer], properties: {answer: {type: string}}}
` + retry
}

// One retry layer, the agent's: `node run` prints each failed request as
// it backs off and the run completes on the request after them; when the
// policy is spent the run fails after exactly its attempts (before, the
// run's attempts retried the step again: 4 requests became 24), and its
// error names every request.
func TestRetryPolicyIsTheOnlyRetryLayer(t *testing.T) {
	tests := []struct {
		name     string
		retry    string
		fail     int32
		wantHits int32
		wantExit int
		want     []string
	}{
		{name: "two 503 then an answer", retry: "retry: {attempts: 3, backoff: 1ms, max_backoff: 2ms}\n", fail: 2, wantHits: 3,
			want: []string{"request 1 failed (HTTP 503): openai: HTTP 503 (server_error): overloaded (request 1); retrying in",
				"!! openai gpt-4.1-mini request 2 failed (HTTP 503)", `"answer": "done"`}},
		{name: "the policy spent", retry: "retry: {attempts: 2, backoff: 1ms, max_backoff: 2ms}\n", fail: 100, wantHits: 2, wantExit: 1,
			want: []string{"request 1 failed (HTTP 503)", "request 2 failed (HTTP 503): openai: HTTP 503 (server_error): overloaded (request 2); not retried",
				"2 requests; before the last: HTTP 503", "gave up after 2 attempts"}},
		{name: "never retried", retry: "retry: {attempts: 1}\n", fail: 100, wantHits: 1, wantExit: 1,
			want: []string{"request 1 failed (HTTP 503)", "not retried"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &flakyProvider{fail: tt.fail}
			srv := httptest.NewServer(p)
			defer srv.Close()
			t.Setenv("OPENAI_API_KEY", "sk-test")
			t.Setenv("ANTHROPIC_API_KEY", "")
			t.Setenv("OPENAI_BASE_URL", srv.URL)
			agents := t.TempDir()
			file := filepath.Join(agents, "flaky.yaml")
			if err := os.WriteFile(file, []byte(retryAgent(tt.retry)), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := runCmd([]string{"--data", t.TempDir(), file, "go"}, &out, &errb)
			all := out.String() + errb.String()
			if code != tt.wantExit {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.wantExit, all)
			}
			if n := p.hits.Load(); n != tt.wantHits {
				t.Fatalf("the provider saw %d requests, want %d:\n%s", n, tt.wantHits, all)
			}
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("output lacks %q:\n%s", w, all)
				}
			}
		})
	}
}

// A retry policy the node cannot follow is refused at load, naming the
// file and the field.
func TestBadRetryPolicyNamesTheField(t *testing.T) {
	for retry, want := range map[string]string{
		"retry: {attempts: 0}\n":                           "", // the default
		"retry: {attempts: -1}\n":                          "retry.attempts: -1: want 1 to 20",
		"retry: {attempts: 21}\n":                          "retry.attempts: 21",
		"retry: {backoff: soon}\n":                         `retry.backoff: "soon" is not a positive duration`,
		"retry: {max_wait: -1s}\n":                         `retry.max_wait: "-1s"`,
		"retry: {backoff: 10s, max_backoff: 1s}\n":         "retry.backoff: 10s is more than max_backoff 1s",
		"retry: {attempts: 2, backof: 1s}\n":               `unknown field "backof"`,
		"retry: {attempts: 5, max_wait: 30s, backoff: 1s}": "",
		"retry: {backoff: 5m}\n":                           "retry.backoff: 5m0s is more than max_wait 2m0s",
		"retry: {backoff: 40s, max_wait: 30s}\n":           "retry.backoff: 40s is more than max_wait 30s",
		"retry: {backoff: 45s, max_wait: 10m}\n":           "",
	} {
		dir := t.TempDir()
		file := filepath.Join(dir, "flaky.yaml")
		if err := os.WriteFile(file, []byte(retryAgent(retry)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := loadAgent(file)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", retry, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), file)):
			t.Errorf("%q: err = %v, want the file and %q", retry, err, want)
		}
	}
}
