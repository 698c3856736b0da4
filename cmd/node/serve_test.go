package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// serving starts `node serve` in-process on a free loopback port with two
// principals and returns its base URL.
func serving(t *testing.T, dir string) string {
	t.Helper()
	return servingWith(t, dir, clusterOptions{})
}

// servingWith is serving with the given cluster and NATS options.
func servingWith(t *testing.T, dir string, c clusterOptions) string {
	t.Helper()
	base, _ := startServe(t, serveOptions{nodeOptions: nodeOptions{agentsDir: "../../examples/agents", data: dir, logger: slog.New(slog.DiscardHandler), cluster: c},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice", "bob-token": "bob"}})
	return base
}

// startServe runs serve(o) in-process and returns its base URL, and stop,
// which ends it and returns serve's error (once; the test's cleanup calls
// it too). A serve that fails to start fails the test.
func startServe(t *testing.T, o serveOptions) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	// done is closed when serve returned, with its error in served: a
	// stop after a failed start does not wait for a second answer.
	done := make(chan struct{})
	var served error
	go func() { served = serve(ctx, o, ready); close(done) }()
	stop := sync.OnceValue(func() error {
		cancel()
		<-done
		return served
	})
	t.Cleanup(func() { _ = stop() })
	select {
	case addr := <-ready:
		return "http://" + addr, stop
	case <-done:
		t.Fatalf("serve: %v", served)
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not start")
	}
	return "", stop
}

func call(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	status, _, out := request(t, method, url, token, body)
	return status, out
}

// sse reads a run's event stream to its end and returns the event types.
func sse(t *testing.T, base, token, run string) ([]string, []uint64) {
	t.Helper()
	return sseFrom(t, base, token, run, "")
}

// sseFrom reads a run's events after the one with ID lastID (none: all).
func sseFrom(t *testing.T, base, token, run, lastID string) ([]string, []uint64) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/runs/"+run+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	var types []string
	var ids []uint64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			n, _ := strconv.ParseUint(id, 10, 64)
			ids = append(ids, n)
		}
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, ev)
			if ev == "end" {
				return types, ids
			}
		}
	}
	t.Fatalf("stream ended without an end event: %v", types)
	return nil, nil
}

func TestHTTPAPI(t *testing.T) {
	base := serving(t, t.TempDir())
	for _, tc := range []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"no token", "GET", "/v1/runs", "", "", 401, "unauthorized"},
		{"wrong token", "GET", "/v1/runs", "nope", "", 401, "unauthorized"},
		{"bad json", "POST", "/v1/runs", "alice-token", "{agent:", 400, "bad_json"},
		{"unknown field", "POST", "/v1/runs", "alice-token", `{"agent":"researcher","message":"x","extra":1}`, 400, "bad_json"},
		{"no agent", "POST", "/v1/runs", "alice-token", `{"message":"x"}`, 400, "invalid"},
		{"unknown agent", "POST", "/v1/runs", "alice-token", `{"agent":"nobody","message":"x"}`, 404, "not_found"},
		{"empty message", "POST", "/v1/runs", "alice-token", `{"agent":"researcher","message":"  "}`, 400, "invalid"},
		// A message the log cannot hold in one record is refused before
		// anything is written (it answered 500 "internal" at ~1 MB).
		{"message over the limit", "POST", "/v1/runs", "alice-token", `{"agent":"researcher","message":"` + strings.Repeat("a", 300<<10) + `"}`, 413, "too_large"},
		// A subagent started by the API gets what its parent's spawn
		// would have to give it (it accepted "not json").
		{"input not valid against the agent's input_schema", "POST", "/v1/runs", "alice-token", `{"agent":"summarizer","message":"not json"}`, 400, "invalid"},
		{"unknown route", "GET", "/v1/nothing", "alice-token", "", 404, "not_found"},
		{"wrong method", "PUT", "/v1/runs", "alice-token", "", 405, "method_not_allowed"},
		{"unknown run", "GET", "/v1/runs/rnope", "alice-token", "", 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(t, tc.method, base+tc.path, tc.token, tc.body)
			errBody, _ := body["error"].(map[string]any)
			if status != tc.status || errBody["code"] != tc.code || errBody["message"] == "" {
				t.Fatalf("= %d %v, want %d %s", status, body, tc.status, tc.code)
			}
		})
	}

	status, started := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if status != 201 {
		t.Fatalf("start: %d %v", status, started)
	}
	run := started["run_id"].(string)
	types, ids := sse(t, base, "alice-token", run)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("events out of order: %v", ids)
		}
	}
	if types[0] != "cairn.run.created" || !contains(types, "cairn.lease.acquired") || !contains(types, "cairn.checkpoint.committed") {
		t.Fatalf("event types = %v", types)
	}
	// A reconnecting client resumes after the last event it had (it got
	// the whole stream again before).
	resumed, resumedIDs := sseFrom(t, base, "alice-token", run, strconv.FormatUint(ids[2], 10))
	if !slices.Equal(resumedIDs, ids[3:]) || !slices.Equal(resumed, types[3:]) {
		t.Fatalf("resumed after id %d: %v %v; want %v %v", ids[2], resumed, resumedIDs, types[3:], ids[3:])
	}
	if resumed, _ := sseFrom(t, base, "alice-token", run, strconv.FormatUint(ids[len(ids)-1], 10)); !slices.Equal(resumed, []string{"end"}) {
		t.Fatalf("resumed after the run's last event: %v; want the end alone", resumed)
	}
	if status, _ := call(t, "GET", base+"/v1/runs/"+run+"/events", "alice-token", ""); status != 200 {
		t.Fatalf("events without Last-Event-ID: %d", status)
	}
	status, shown := call(t, "GET", base+"/v1/runs/"+run, "alice-token", "")
	if status != 200 || shown["status"] != "completed" || len(shown["children"].([]any)) != 2 || shown["usage"].(map[string]any)["steps"].(float64) != 7 {
		t.Fatalf("show: %d %v", status, shown)
	}
	// Another principal sees nothing of alice's runs (C10).
	if status, _ := call(t, "GET", base+"/v1/runs/"+run, "bob-token", ""); status != 404 {
		t.Fatalf("bob sees alice's run: %d", status)
	}
	if status, _ := call(t, "POST", base+"/v1/runs/"+run+"/cancel", "bob-token", "{}"); status != 404 {
		t.Fatalf("bob cancels alice's run: %d", status)
	}
	_, listed := call(t, "GET", base+"/v1/runs", "alice-token", "")
	if runs := listed["runs"].([]any); len(runs) != 1 || runs[0].(map[string]any)["run_id"] != run {
		t.Fatalf("alice's runs = %v", listed)
	}
	if _, listed := call(t, "GET", base+"/v1/runs", "bob-token", ""); len(listed["runs"].([]any)) != 0 {
		t.Fatalf("bob's runs = %v", listed)
	}
	// Continue the completed session, then cancel the continuation.
	status, cont := call(t, "POST", base+"/v1/runs/"+run+"/continue", "alice-token", `{"message":"And from the Moon?"}`)
	if status != 201 || cont["session_id"] != started["session_id"] || cont["run_id"] == run {
		t.Fatalf("continue: %d %v", status, cont)
	}
	if status, _ := call(t, "POST", base+"/v1/runs/"+run+"/continue", "alice-token", `{"message":"again"}`); status != 409 {
		t.Fatalf("a second continuation while the first runs: %d, want 409", status)
	}
	status, cancelled := call(t, "POST", base+"/v1/runs/"+cont["run_id"].(string)+"/cancel", "alice-token", "{}")
	if status != 200 || (cancelled["status"] != "cancelled" && cancelled["status"] != "completed" && cancelled["status"] != "failed") {
		t.Fatalf("cancel: %d %v", status, cancelled)
	}

	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`cairn_runs{status="completed"}`, `cairn_tool_calls_total{tool="run_js"}`, "cairn_commit_seconds_count", `cairn_model_requests_total{agent="researcher"}`} {
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("metrics lack %s:\n%s", want, metrics)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestServeRefusesOpenListenerWithoutAuth(t *testing.T) {
	err := serve(context.Background(), serveOptions{nodeOptions: nodeOptions{agentsDir: "../../examples/agents", data: t.TempDir()}, listen: "0.0.0.0:0", tokens: map[string]string{}}, nil)
	if err == nil || !strings.Contains(err.Error(), "needs authentication") {
		t.Fatalf("err = %v", err)
	}
}

// Kill -9 of a serving node in the middle of a run; a new node on the same
// data directory finishes it and nothing is committed twice.
func TestKill9ServeAndRestart(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CAIRN_TOKEN=tok", "CAIRN_NODE_ARGS="+strings.Join([]string{"serve", "--agents", "../../examples/agents", "--data", dir, "--listen", addr}, "\x1f"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Ready when /readyz answers (bounded).
		for i := 0; i < 300; i++ {
			if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return cmd
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatal("node did not become ready")
		return nil
	}
	base := "http://" + addr
	first := start()
	status, started := call(t, "POST", base+"/v1/runs", "tok", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if status != 201 {
		t.Fatalf("start: %d %v", status, started)
	}
	_ = first.Process.Kill()
	_ = first.Wait()

	second := start()
	defer func() { _ = second.Process.Kill(); _ = second.Wait() }()
	run := started["run_id"].(string)
	types, _ := sse(t, base, "tok", run)
	commits := 0
	for _, ty := range types {
		if ty == "cairn.checkpoint.committed" {
			commits++
		}
	}
	status, shown := call(t, "GET", base+"/v1/runs/"+run, "tok", "")
	if status != 200 || shown["status"] != "completed" {
		t.Fatalf("after kill -9 and restart: %d %v (events %v)", status, shown, types)
	}
	if commits != 10 {
		t.Fatalf("%d checkpoint commits, want the 10 of one clean run (events %v)", commits, types)
	}
	fmt.Fprintln(io.Discard, commits)
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/node.yaml"
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:9999\ndata: /from/file\nmodel: scripted:x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CAIRN_MODEL", "openai:from-env")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8700", "")
	data := fs.String("data", ".cairn", "")
	mdl := fs.String("model", "", "")
	fs.String("config", "", "")
	if err := parseFlags(fs, []string{"--data", "/from/flag"}, "listen", "data", "model", "config"); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, path); err != nil {
		t.Fatal(err)
	}
	if *listen != "127.0.0.1:9999" || *data != "/from/flag" || *mdl != "openai:from-env" {
		t.Fatalf("listen %s data %s model %s", *listen, *data, *mdl)
	}
	if err := os.WriteFile(path, []byte("lisen: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, path); err == nil || !strings.Contains(err.Error(), `unknown setting "lisen"`) {
		t.Fatalf("err = %v", err)
	}
}

// A CAIRN_* value that does not parse stops the command with an error
// naming the variable and what it wants; before, CAIRN_MEMBER_TTL=10 fell
// back to the default without a word. A command-line flag still wins over
// its variable, and a malformed CAIRN_TOKENS names the entry, never a token.
func TestEnvironmentThatDoesNotParse(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		want       string
	}{
		{"CAIRN_MEMBER_TTL", "10", `CAIRN_MEMBER_TTL="10"`},
		{"CAIRN_REPLICAS", "three", `CAIRN_REPLICAS="three"`},
		{"CAIRN_CLUSTER", "yes please", `CAIRN_CLUSTER="yes please"`},
		{"CAIRN_GROUP_COMMIT", "sometimes", `CAIRN_GROUP_COMMIT: "sometimes": want adaptive, single or batch`},
		{"CAIRN_TOKENS", "alice=tok1,s3cr3t-bare", "CAIRN_TOKENS: entry 2 has no '='"},
		{"CAIRN_TOKENS", "alice=tok1,bob=tok1", `CAIRN_TOKENS: entry 2 (principal "bob"): its token is also "alice"'s`},
		{"CAIRN_TOKENS", "=tok1", "CAIRN_TOKENS: entry 1 has no principal"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			var stderr strings.Builder
			// --data in a fresh directory: the command must stop before it
			// opens anything.
			code := serveCmd([]string{"--data", t.TempDir()}, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("serve with %s=%s: exit %d, %q; want exit 2 naming %s", tc.env, tc.value, code, stderr.String(), tc.want)
			}
			for _, secret := range []string{"tok1", "s3cr3t"} {
				if tc.env == "CAIRN_TOKENS" && strings.Contains(stderr.String(), secret) {
					t.Fatalf("the error shows a token: %q", stderr.String())
				}
			}
		})
	}
	t.Run("the flag wins over its variable", func(t *testing.T) {
		t.Setenv("CAIRN_MEMBER_TTL", "not a duration")
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		ttl := fs.Duration("member-ttl", 10*time.Second, "")
		if err := parseFlags(fs, []string{"--member-ttl", "20s"}, "member-ttl"); err != nil || *ttl != 20*time.Second {
			t.Fatalf("--member-ttl 20s with a bad CAIRN_MEMBER_TTL: %s, %v", *ttl, err)
		}
	})
	t.Run("a good value is used", func(t *testing.T) {
		t.Setenv("CAIRN_MEMBER_TTL", "30s")
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		ttl := fs.Duration("member-ttl", 10*time.Second, "")
		if err := parseFlags(fs, nil, "member-ttl"); err != nil || *ttl != 30*time.Second {
			t.Fatalf("CAIRN_MEMBER_TTL=30s: %s, %v", *ttl, err)
		}
	})
}
