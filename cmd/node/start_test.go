package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/actors"
)

// post is POST /v1/runs as alice with the given Idempotency-Key values.
func post(t *testing.T, base string, keys []string, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/runs", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice-token")
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

// Issue 22: POST /v1/runs with an Idempotency-Key returns the run the key
// started (201 the first time, 200 with Idempotent-Replayed after), the same
// key with another body is a 409 idempotency_conflict naming the key, a bad
// key is a 400 naming the header with nothing started, and `runs start`
// retries a refused connection and a lost answer with its key and gets the
// one run back.
func TestStartIdempotencyKey(t *testing.T) {
	base := serving(t, t.TempDir())
	const body = `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`

	status, _, first := post(t, base, []string{"order-1"}, body)
	if status != http.StatusCreated || first["run_id"] == nil {
		t.Fatalf("first start = %d %v; want 201 with a run", status, first)
	}
	status, hdr, again := post(t, base, []string{"order-1"}, body)
	if status != http.StatusOK || hdr.Get("Idempotent-Replayed") != "true" || again["run_id"] != first["run_id"] || again["session_id"] != first["session_id"] {
		t.Fatalf("retry = %d %v %v; want 200, replayed, the run %v", status, hdr, again, first)
	}
	if _, want := actors.KeyedIDs("alice", "order-1"); first["run_id"] != want {
		t.Fatalf("run %v; want the key's run %s", first["run_id"], want)
	}

	status, _, conflict := post(t, base, []string{"order-1"}, `{"agent":"researcher","message":"Another question."}`)
	errBody, _ := conflict["error"].(map[string]any)
	if msg, _ := errBody["message"].(string); status != http.StatusConflict || errBody["code"] != "idempotency_conflict" || !strings.Contains(msg, `"order-1"`) {
		t.Fatalf("same key, other message = %d %v; want 409 idempotency_conflict naming the key", status, conflict)
	}

	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"too long", []string{strings.Repeat("k", actors.MaxIdempotencyKey+1)}},
		{"not printable", []string{"order\t2"}},
		{"not ASCII", []string{"ordér-2"}},
		{"twice", []string{"order-2", "order-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, out := post(t, base, tc.keys, body)
			errBody, _ := out["error"].(map[string]any)
			if msg, _ := errBody["message"].(string); status != http.StatusBadRequest || !strings.HasPrefix(msg, "Idempotency-Key header: ") {
				t.Fatalf("= %d %v; want 400 naming the header", status, out)
			}
			for _, k := range tc.keys {
				if _, run := actors.KeyedIDs("alice", k); k != "" {
					if status, _ := call(t, "GET", base+"/v1/runs/"+run, "alice-token", ""); status != http.StatusNotFound {
						t.Fatalf("the run of refused key %q: %d; want 404", k, status)
					}
				}
			}
		})
	}

	t.Run("the CLI retries with its key", func(t *testing.T) {
		target, _ := url.Parse(base)
		proxy := httputil.NewSingleHostReverseProxy(target)
		var posts atomic.Int32
		// The first POST reaches the node, which starts the run, and its
		// answer is lost: the client sees a 502.
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "POST" && posts.Add(1) == 1 {
				rec := httptest.NewRecorder()
				proxy.ServeHTTP(rec, r)
				if rec.Code != http.StatusCreated {
					t.Errorf("the first try reached the node and got %d; want 201", rec.Code)
				}
				http.Error(w, "bad gateway", http.StatusBadGateway)
				return
			}
			proxy.ServeHTTP(w, r)
		}))
		defer front.Close()
		// Before that, the first connection is refused.
		var dials atomic.Int32
		transport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
		var tries []error
		c := &client{base: front.URL, token: "alice-token", http: &http.Client{Transport: transport},
			retried: func(_ int, err error) { tries = append(tries, err) }}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		key := newIdempotencyKey()
		got, err := c.start(ctx, "researcher", "Is the Great Wall visible from orbit?", key)
		if err != nil {
			t.Fatal(err)
		}
		if len(tries) != 2 || !errors.Is(tries[0], syscall.ECONNREFUSED) || !strings.Contains(tries[1].Error(), "502") {
			t.Fatalf("tries before the answer: %v; want a refused connection, then a 502", tries)
		}
		if _, want := actors.KeyedIDs("alice", key); got.RunID != want || !got.Existing || got.IdempotencyKey != key {
			t.Fatalf("start = %+v; want the run %s the lost try started, existing", got, want)
		}
		// And through the command line, against the node itself.
		var out, errOut bytes.Buffer
		if code := runsCmd([]string{"start", "--api", base, "--token", "alice-token", "--key", key, "--json", "researcher", "Is the Great Wall visible from orbit?"}, &out, &errOut); code != 0 {
			t.Fatalf("runs start: %d %s", code, errOut.String())
		}
		var printed startAnswer
		if err := json.Unmarshal(out.Bytes(), &printed); err != nil || printed.RunID != got.RunID || !printed.Existing {
			t.Fatalf("runs start printed %s (%v); want run %s, existing", out.String(), err, got.RunID)
		}
		if code := runsCmd([]string{"start", "--api", base, "--key", "", "researcher"}, io.Discard, io.Discard); code != 2 {
			t.Fatalf("runs start with no message: %d; want 2", code)
		}
	})
}

// MCP's start_run takes the same idempotency key as idempotency_key.
func TestMCPStartIdempotencyKey(t *testing.T) {
	base := serveAt(t, nodeOptions{agentsDir: askerDir(t, nil)})
	alice := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
	args := map[string]any{"agent": "asker", "message": "Name a city.", "idempotency_key": "mcp-1"}
	first, msg := callTool(t, alice, "start_run", args)
	if msg != "" || first.RunID == "" {
		t.Fatalf("start_run: %+v %s", first, msg)
	}
	again, msg := callTool(t, alice, "start_run", args)
	if msg != "" || again.RunID != first.RunID || again.SessionID != first.SessionID {
		t.Fatalf("start_run again: %+v %s; want run %s", again, msg, first.RunID)
	}
	if _, msg := callTool(t, alice, "start_run", map[string]any{"agent": "asker", "message": "Name a river.", "idempotency_key": "mcp-1"}); !strings.Contains(msg, `"mcp-1"`) {
		t.Errorf("same key, other message: %q; want a conflict naming the key", msg)
	}
	if _, msg := callTool(t, alice, "start_run", map[string]any{"agent": "asker", "message": "Name a city.", "idempotency_key": ""}); !strings.Contains(msg, "idempotency_key: is empty") {
		t.Errorf("empty key: %q; want an error naming idempotency_key", msg)
	}
}
