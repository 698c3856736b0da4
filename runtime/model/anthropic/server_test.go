package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// reply is one scripted HTTP answer of the fake server.
type reply struct {
	status int
	header map[string]string
	body   string
	// truncate declares a Content-Length longer than body and closes the
	// connection after body: the client sees a truncated body.
	truncate bool
	// hang blocks until the client gives up (the request's context ends).
	hang bool
	// drop closes the connection without any response.
	drop bool
}

func ok(body string) reply { return reply{status: 200, body: body} }

// recorded is one request the fake server received.
type recorded struct {
	path   string
	header http.Header
	raw    []byte
	body   map[string]any
}

// fakeServer is an httptest server that answers with scripted replies in
// order and records every request. It never reaches the network.
type fakeServer struct {
	t       testing.TB
	srv     *httptest.Server
	mu      sync.Mutex
	replies []reply
	reqs    []recorded
	arrived chan struct{} // one value per request, after it is recorded
	// hook, if set, runs before request n (from 0) is answered.
	hook func(n int)
	// hits counts the HTTP requests that reached the handler.
	hits atomic.Int64
}

func newFakeServer(t testing.TB, replies ...reply) *fakeServer {
	f := &fakeServer{t: t, replies: replies, arrived: make(chan struct{}, 100)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) URL() string { return f.srv.URL }

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	raw, _ := io.ReadAll(r.Body)
	rec := recorded{path: r.URL.Path, header: r.Header.Clone(), raw: raw}
	_ = json.Unmarshal(raw, &rec.body)
	f.mu.Lock()
	f.reqs = append(f.reqs, rec)
	var rp reply
	if len(f.replies) == 0 {
		rp = reply{status: 599, body: `{"type":"error","error":{"type":"api_error","message":"fake server: no scripted reply left"}}`}
	} else {
		rp, f.replies = f.replies[0], f.replies[1:]
	}
	n := len(f.reqs) - 1
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	f.arrived <- struct{}{}
	switch {
	case rp.hang:
		<-r.Context().Done()
		return
	case rp.drop:
		hj, _ := w.(http.Hijacker)
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	if rp.truncate {
		w.Header().Set("Content-Length", strconv.Itoa(len(rp.body)+100))
	}
	w.WriteHeader(rp.status)
	_, _ = io.WriteString(w, rp.body)
	if rp.truncate {
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		hj, _ := w.(http.Hijacker)
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
		}
	}
}

// setHook sets the hook.
func (f *fakeServer) setHook(h func(n int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = h
}

// requests returns what the server received so far.
func (f *fakeServer) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// sleeps records the waits of the retry loop instead of waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d = append(s.d, d)
	return ctx.Err()
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// newTestModel returns a Model against f with a recording sleep.
func newTestModel(t testing.TB, f *fakeServer, mut ...func(*Config)) (*Model, *sleeps) {
	t.Helper()
	s := &sleeps{}
	cfg := Config{Model: "claude-test", APIKey: "sk-ant-test-secret-key-0123456789", BaseURL: f.URL(), Sleep: s.sleep}
	for _, fn := range mut {
		fn(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, s
}

// jsonEqual compares a decoded JSON value with the JSON text want.
func jsonEqual(t testing.TB, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want JSON: %v", what, err)
	}
	g, _ := json.Marshal(got)
	var gv any
	_ = json.Unmarshal(g, &gv)
	if !reflect.DeepEqual(gv, w) {
		gi, _ := json.MarshalIndent(gv, "", "  ")
		wi, _ := json.MarshalIndent(w, "", "  ")
		t.Fatalf("%s:\n got %s\nwant %s", what, gi, wi)
	}
}

// field reads a path of object keys and array indexes from decoded JSON.
func field(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		default:
			panic(fmt.Sprintf("bad path element %v", p))
		}
	}
	return v
}
