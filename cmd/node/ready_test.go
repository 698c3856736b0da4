package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// request answers a request's status, Retry-After header and JSON body.
func request(t *testing.T, method, url, token, body string) (int, string, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header.Get("Retry-After"), out
}

// refuseAll makes every stream of nc's server refuse writes (a full disk
// refuses them all) and returns what restores them.
func refuseAll(t *testing.T, nc *nats.Conn) (restore func()) {
	t.Helper()
	ctx := context.Background()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var was []njs.StreamConfig
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		was = append(was, cfg)
		cfg.MaxBytes, cfg.Discard = 1, njs.DiscardNew // any message is larger
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
	}
	return func() {
		for _, cfg := range was {
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Errorf("stream %s: %v", cfg.Name, err)
			}
		}
	}
}

// until polls /readyz until it answers status (a probe's answer changes
// with the server, outside the node's events: a last resort, bounded).
func until(t *testing.T, base string, status int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, _, body := request(t, "GET", base+"/readyz", "", "")
		if got == status {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %v after a minute, want %d", got, body, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// D6 (truthful readiness): /readyz answers 200 {"ready":true} while the
// node can commit and 503 {"ready":false,"reason"} while JetStream refuses
// every write; a start meanwhile answers 503 unavailable with Retry-After
// at once, and once writes succeed again the node is ready and starts
// runs, with no restart.
func TestReadyzTellsTheTruth(t *testing.T) {
	srv := natstest.Server(t)
	base := serveAt(t, nodeOptions{agentsDir: "../../examples/agents", natsURL: srv.ClientURL()})
	if body := until(t, base, http.StatusOK); body["ready"] != true {
		t.Fatalf("/readyz body %v, want ready true", body)
	}
	restore := refuseAll(t, natstest.Connect(t, srv))
	body := until(t, base, http.StatusServiceUnavailable)
	if reason, _ := body["reason"].(string); body["ready"] != false || reason == "" {
		t.Fatalf("/readyz body %v, want ready false and a reason", body)
	}
	start := `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`
	began := time.Now()
	status, retry, out := request(t, "POST", base+"/v1/runs", "alice-token", start)
	errBody, _ := out["error"].(map[string]any)
	if status != http.StatusServiceUnavailable || errBody["code"] != "unavailable" || retry == "" {
		t.Fatalf("start while the log refuses writes = %d %v (Retry-After %q), want 503 unavailable with Retry-After", status, out, retry)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("start refused after %s, want at once", took)
	}
	restore()
	if body := until(t, base, http.StatusOK); body["ready"] != true {
		t.Fatalf("/readyz body %v, want ready true", body)
	}
	if status, _, out := request(t, "POST", base+"/v1/runs", "alice-token", start); status != http.StatusCreated {
		t.Fatalf("start once the log takes writes = %d %v, want 201", status, out)
	}
}
