package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// guarded is the guard over a mux with the node's route shapes, each
// handler answering 200 (and decoding its body, where the API does).
func guarded(tokens bool) http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.ContentLength != 0 {
			var v map[string]any
			if !decodeBody(w, r, &v) {
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}
	mux.HandleFunc("POST /v1/runs", ok)
	mux.HandleFunc("GET /v1/runs", ok)
	mux.HandleFunc("POST /v1/runs/{run}/cancel", ok)
	mux.HandleFunc("GET /healthz", ok)
	mux.Handle("/mcp", http.HandlerFunc(ok))
	return Guard(mux, tokens)
}

// Each cross-site request an attacker's test made against a node without
// tokens (and its like against one with tokens) is refused before any
// handler runs; what a local client, the CLI and the node's own page send
// passes.
func TestGuardRefusesCrossSiteUse(t *testing.T) {
	const local = "127.0.0.1:8700"
	for _, tc := range []struct {
		name    string
		tokens  bool
		method  string
		path    string
		host    string
		headers map[string]string
		body    string
		status  int
		code    string
	}{
		{name: "text/plain POST from another site's page", method: "POST", path: "/v1/runs", host: local,
			headers: map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example"}, body: `{"agent":"a","message":"m"}`, status: 403, code: "cross_site"},
		{name: "text/plain POST without an Origin (an old browser's form)", method: "POST", path: "/v1/runs", host: local,
			headers: map[string]string{"Content-Type": "text/plain"}, body: `{"agent":"a","message":"m"}`, status: 415, code: "unsupported_media_type"},
		{name: "form-encoded cancel", method: "POST", path: "/v1/runs/r1/cancel", host: local,
			headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "x=1", status: 415, code: "unsupported_media_type"},
		{name: "forged Host lists runs (DNS rebinding)", method: "GET", path: "/v1/runs", host: "evil.example:8700", status: 403, code: "forbidden_host"},
		{name: "forged Host reads the metrics", method: "GET", path: "/healthz", host: "rebound.example", status: 403, code: "forbidden_host"},
		{name: "cross-origin MCP initialize", method: "POST", path: "/mcp", host: local,
			headers: map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, body: `{"jsonrpc":"2.0","id":1,"method":"initialize"}`, status: 403, code: "cross_site"},
		{name: "a script of another site, by Sec-Fetch-Site", method: "GET", path: "/v1/runs", host: local,
			headers: map[string]string{"Sec-Fetch-Site": "cross-site"}, status: 403, code: "cross_site"},
		{name: "Origin null (a sandboxed frame)", method: "POST", path: "/v1/runs", host: local,
			headers: map[string]string{"Content-Type": "application/json", "Origin": "null"}, body: `{}`, status: 403, code: "cross_site"},
		{name: "with tokens: another site's Origin", tokens: true, method: "POST", path: "/v1/runs", host: "cairn.internal:8700",
			headers: map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, body: `{}`, status: 403, code: "cross_site"},

		{name: "curl with JSON", method: "POST", path: "/v1/runs", host: local, headers: map[string]string{"Content-Type": "application/json"}, body: `{"agent":"a"}`, status: 200},
		{name: "curl on localhost", method: "GET", path: "/v1/runs", host: "localhost:8700", status: 200},
		{name: "IPv6 loopback", method: "GET", path: "/v1/runs", host: "[::1]:8700", status: 200},
		{name: "the node's own page", method: "POST", path: "/v1/runs/r1/cancel", host: local,
			headers: map[string]string{"Content-Type": "application/json", "Origin": "http://" + local, "Sec-Fetch-Site": "same-origin"}, body: `{}`, status: 200},
		{name: "a typed URL", method: "GET", path: "/v1/runs", host: local, headers: map[string]string{"Sec-Fetch-Site": "none"}, status: 200},
		{name: "a cancel without a body", method: "POST", path: "/v1/runs/r1/cancel", host: local, status: 200},
		{name: "with tokens, any Host", tokens: true, method: "GET", path: "/v1/runs", host: "cairn.internal:8700", status: 200},

		{name: "unknown route", method: "GET", path: "/v2/nothing", host: local, status: 404, code: "not_found"},
		{name: "wrong method", method: "DELETE", path: "/v1/runs", host: local, status: 405, code: "method_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://"+tc.host+tc.path, strings.NewReader(tc.body))
			req.Host = tc.host
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			guarded(tc.tokens).ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("%s %s: %d %s; want %d", tc.method, tc.path, rec.Code, rec.Body.String(), tc.status)
			}
			if tc.code == "" {
				return
			}
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != tc.code || body.Error.Message == "" {
				t.Fatalf("body %q; want a JSON error %s with a message", rec.Body.String(), tc.code)
			}
			if tc.status == 405 && rec.Header().Get("Allow") != "GET, POST" {
				t.Fatalf("Allow: %q, want GET, POST", rec.Header().Get("Allow"))
			}
		})
	}
}

// A body the API cannot take is refused with the right status and a JSON
// error naming the reason: before, a body over 1 MiB answered 400
// "unexpected EOF", and invalid UTF-8 and lone surrogates were replaced
// silently.
func TestBadBodies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		status int
		says   string
	}{
		{"over the limit", `{"message":"` + strings.Repeat("a", maxBody) + `"}`, 413, "limit of 1048576 bytes"},
		{"invalid UTF-8", "{\"message\":\"a\xffb\"}", 400, "invalid UTF-8 at byte 13"},
		{"a lone high surrogate", `{"message":"a\ud800b"}`, 400, "lone UTF-16 surrogate"},
		{"a lone low surrogate", `{"message":"\udc00"}`, 400, "lone UTF-16 surrogate"},
		{"two values", `{} {}`, 400, "more than one JSON value"},
		{"a surrogate pair", `{"message":"\ud83d\ude00"}`, 200, ""},
		{"an escaped backslash before u", `{"message":"\\ud800"}`, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "http://127.0.0.1:8700/v1/runs", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			guarded(false).ServeHTTP(rec, req)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.says) {
				t.Fatalf("%d %s; want %d saying %q", rec.Code, rec.Body.String(), tc.status, tc.says)
			}
		})
	}
}

// Whatever checkJSONText accepts decodes without a replacement character
// the text did not hold.
func FuzzCheckJSONText(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud800"`, `"\ud83d\ude00"`, "\"\xff\"", `"\\ud800"`, `"\uFFFD"`, `"\ud83d\u0041"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if checkJSONText([]byte(text)) != nil {
			return
		}
		var s string
		if json.Unmarshal([]byte(text), &s) != nil {
			return
		}
		want := strings.Count(text, "\uFFFD") + strings.Count(strings.ToLower(text), `\ufffd`) - strings.Count(strings.ToLower(text), `\\ufffd`)
		if got := strings.Count(s, "\uFFFD"); got > want {
			t.Fatalf("%q accepted, and it decodes with %d replacement characters (%d in the text)", text, got, want)
		}
	})
}
