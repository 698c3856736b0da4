package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/cairn-agents/cairn/internal/syncbuf"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
)

// startHelper starts a Host on the helper server; listed receives the
// server's name after each relisting.
func startHelper(t *testing.T, sc ServerConfig) (*Host, chan string, *syncbuf.Buffer) {
	t.Helper()
	listed := make(chan string, 16)
	logs := &syncbuf.Buffer{}
	h, err := Start(context.Background(), &Config{Servers: []ServerConfig{sc}}, Options{
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Blobs: &memBlobs{}, Redactor: runtime.Secrets{"hunter2"},
		listed: func(s string) { listed <- s },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h, listed, logs
}

func invoke(h *Host, agent, capability, args string) (jstool.Value, error) {
	return h.Backend(agent, nil).Invoke(context.Background(), jstool.Invocation{ScriptCallID: "c1", Seq: 1, Capability: capability, Args: json.RawMessage(args)})
}

func text(t *testing.T, v jstool.Value) string {
	t.Helper()
	var r resultValue
	if err := json.Unmarshal(v.JSON, &r); err != nil {
		t.Fatalf("value %s: %v", v.JSON, err)
	}
	return r.Text
}

func TestBindingAndCatalog(t *testing.T) {
	sc, _ := helperConfig(t, "count", "pick")
	sc.Effects = map[string]string{"count": runtime.EffectIdempotent}
	h, _, logs := startHelper(t, sc)
	caps := h.Capabilities()
	if len(caps) != 2 || caps[0].Name != "helper.count" || caps[1].Name != "helper.pick" {
		t.Fatalf("capabilities = %+v", caps)
	}
	if caps[0].Effect != runtime.EffectIdempotent || caps[1].Effect != runtime.EffectReadOnly {
		t.Errorf("effects: count %q (configured idempotent), pick %q (readOnlyHint)", caps[0].Effect, caps[1].Effect)
	}
	if strings.Contains(string(caps[1].InputSchema), `"if"`) || !strings.Contains(string(caps[1].InputSchema), `"anyOf"`) {
		t.Errorf("pick's schema was not converted: %s", caps[1].InputSchema)
	}
	if g := h.Grants(); len(g) != 1 || strings.Join(g["agent"], ",") != "helper.count,helper.pick" {
		t.Errorf("grants = %v", g)
	}
	if !strings.Contains(logs.String(), "rewrote if/then/else") {
		t.Errorf("the conversion was not logged:\n%s", logs.String())
	}
	// The helper prints a secret on stderr: logged, redacted.
	if !strings.Contains(logs.String(), "helper server up; token=[REDACTED]") {
		t.Errorf("the server's stderr was not logged:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("a secret reached the log:\n%s", logs.String())
	}
}

func TestStartErrors(t *testing.T) {
	t.Run("allowed tool not offered", func(t *testing.T) {
		sc, _ := helperConfig(t, "count", "nope")
		_, err := Start(context.Background(), &Config{Servers: []ServerConfig{sc}}, Options{})
		if err == nil || !strings.Contains(err.Error(), `tools[1]: the server does not offer "nope"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("schema the gate refuses", func(t *testing.T) {
		sc, _ := helperConfig(t, "count", "bad")
		sc.Env[helperBadTools] = "1"
		_, err := Start(context.Background(), &Config{Servers: []ServerConfig{sc}}, Options{})
		var se *SchemaError
		if !errors.As(err, &se) || se.Server != "helper" || se.Tool != "bad" || se.Keyword != "patternProperties" {
			t.Fatalf("err = %v, want a SchemaError for helper/bad/patternProperties", err)
		}
		if !strings.Contains(err.Error(), "server helper: tool bad: input schema: keyword patternProperties") {
			t.Errorf("message does not name server, tool and keyword: %v", err)
		}
	})
	t.Run("command that does not exist", func(t *testing.T) {
		sc := ServerConfig{Name: "gone", Command: []string{"/nonexistent/mcp-server"}, Tools: []string{"x"}, Agents: []string{"a"}}
		_, err := Start(context.Background(), &Config{Servers: []ServerConfig{sc}}, Options{})
		if err == nil || !strings.Contains(err.Error(), "mcp: server gone: connect") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestAuthorizationPerCall(t *testing.T) {
	sc, counter := helperConfig(t, "count")
	h, _, _ := startHelper(t, sc)
	if _, err := invoke(h, "intruder", "helper.count", `{}`); !errors.Is(err, ErrNotGranted) {
		t.Fatalf("err = %v, want ErrNotGranted", err)
	}
	if _, err := os.Stat(counter); !os.IsNotExist(err) {
		t.Fatal("the refused call reached the server")
	}
	if _, err := invoke(h, "agent", "kv.get", `{}`); !errors.Is(err, jstool.ErrUnknownCapability) {
		t.Fatalf("err = %v, want ErrUnknownCapability", err)
	}
}

// TestCrashMidCall: the server exits in the middle of a call. The call
// fails with ErrServerLost, the supervisor starts a new process, and the
// next call is served by it.
func TestCrashMidCall(t *testing.T) {
	sc, _ := helperConfig(t, "count", "crash")
	h, listed, logs := startHelper(t, sc)
	srv := h.server("helper")
	first := srv.pid()
	if first == 0 {
		t.Fatal("no process")
	}
	_, err := invoke(h, "agent", "helper.crash", `{}`)
	if !errors.Is(err, ErrServerLost) {
		t.Fatalf("crash: err = %v, want ErrServerLost", err)
	}
	<-listed // the restarted server was listed
	v, err := invoke(h, "agent", "helper.count", `{}`)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if got := text(t, v); got != "count=1" {
		t.Errorf("count = %q", got)
	}
	if second := srv.pid(); second == 0 || second == first {
		t.Errorf("pids %d then %d: the server was not restarted", first, second)
	}
	if srv.started() != 2 {
		t.Errorf("starts = %d, want 2", srv.started())
	}
	if !strings.Contains(logs.String(), "helper: crashing now") {
		t.Errorf("the crash's last words were not logged:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "reconnecting") {
		t.Errorf("the restart was not logged:\n%s", logs.String())
	}
}

// TestKilledServerRestarts: a server killed from outside between calls.
func TestKilledServerRestarts(t *testing.T) {
	sc, _ := helperConfig(t, "count")
	h, listed, _ := startHelper(t, sc)
	srv := h.server("helper")
	if err := syscall.Kill(srv.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-listed
	if _, err := invoke(h, "agent", "helper.count", `{}`); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}

// TestToolsListChanged: a bound tool the server stops offering fails with
// ErrUnavailable (it is never called); offered again, unchanged, it works.
func TestToolsListChanged(t *testing.T) {
	sc, counter := helperConfig(t, "count", "drop", "restore")
	h, listed, _ := startHelper(t, sc)
	if _, err := invoke(h, "agent", "helper.drop", `{}`); err != nil {
		t.Fatal(err)
	}
	<-listed
	if _, err := invoke(h, "agent", "helper.count", `{}`); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no longer offers") {
		t.Fatalf("dropped tool: err = %v, want ErrUnavailable", err)
	}
	if _, err := os.Stat(counter); !os.IsNotExist(err) {
		t.Fatal("the dropped tool was called")
	}
	if _, err := invoke(h, "agent", "helper.restore", `{}`); err != nil {
		t.Fatal(err)
	}
	<-listed
	if _, err := invoke(h, "agent", "helper.count", `{}`); err != nil {
		t.Fatalf("restored tool: %v", err)
	}
}

func TestArgumentsPassThrough(t *testing.T) {
	sc, _ := helperConfig(t, "pick")
	h, _, _ := startHelper(t, sc)
	// The gate's schema is checked by the canonical invoker, not here: the
	// backend passes what it is given, and the server's own check refuses.
	v, err := invoke(h, "agent", "helper.pick", `{"kind":"bag"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, v); got != `{"kind":"bag"}` {
		t.Errorf("text = %q", got)
	}
}

func TestStderrLines(t *testing.T) {
	logs := &syncbuf.Buffer{}
	s := &server{opts: &Options{Redactor: secretsOf("pw")}, log: slog.New(slog.NewTextHandler(logs, nil))}
	w := &stderrLog{s: s}
	long := strings.Repeat("x", maxStderrLine+10)
	for _, chunk := range []string{"one\r\ntw", "o pw\n", long, "\n"} {
		if n, err := w.Write([]byte(chunk)); err != nil || n != len(chunk) {
			t.Fatal(n, err)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "line=one\n") || !strings.Contains(out, `line="two [REDACTED]"`) || strings.Contains(out, "pw") {
		t.Errorf("log:\n%s", out)
	}
	// The long line is cut, not shortened: every x is logged.
	if got := strings.Count(out, "x"); got != len(long) {
		t.Errorf("%d x logged, want %d", got, len(long))
	}
}

// FuzzStderrLog: whatever a server writes to stderr, in whatever chunks,
// every byte of its complete lines is logged once, in order (a CR before
// the newline aside), and nothing panics.
func FuzzStderrLog(f *testing.F) {
	f.Add([]byte("a\r\nb\n"), 1)
	f.Add([]byte(strings.Repeat("y", maxStderrLine+3)+"\n"), 7)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		data = append(data, '\n')
		logs := &syncbuf.Buffer{}
		s := &server{opts: &Options{Redactor: secretsOf("\x00never")}, log: slog.New(slog.NewJSONHandler(logs, nil))}
		w := &stderrLog{s: s}
		if cut < 0 {
			cut = -cut
		}
		cut %= len(data) + 1
		_, _ = w.Write(data[:cut])
		_, _ = w.Write(data[cut:])
		var got strings.Builder
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec struct{ Line string }
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			got.WriteString(rec.Line)
		}
		var want strings.Builder
		for _, line := range strings.Split(strings.ToValidUTF8(string(data[:len(data)-1]), "\uFFFD"), "\n") {
			want.WriteString(strings.TrimRight(line, "\r"))
		}
		if strings.ToValidUTF8(got.String(), "\uFFFD") != want.String() && !strings.Contains(want.String(), "\r") {
			t.Fatalf("logged %q, want %q", got.String(), want.String())
		}
	})
}

// TestServerEnvironment: a stdio server gets its configured variables and
// a few harmless ones of the node's, never the node's credentials.
func TestServerEnvironment(t *testing.T) {
	t.Setenv("CAIRN_TEST_NODE_CREDENTIAL", "node-secret")
	sc, _ := helperConfig(t, "getenv")
	sc.Env["GIVEN"] = "given-value"
	h, _, _ := startHelper(t, sc)
	for name, want := range map[string]string{"CAIRN_TEST_NODE_CREDENTIAL": "value=", "GIVEN": "value=given-value", "PATH": "value=" + os.Getenv("PATH")} {
		v, err := invoke(h, "agent", "helper.getenv", `{"name":"`+name+`"}`)
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, v); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
}

// TestEffectChangeMakesToolUnavailable: a tool whose annotations change its
// effect class after start is not called under the class it was bound with.
func TestEffectChangeMakesToolUnavailable(t *testing.T) {
	sc, counter := helperConfig(t, "count", "relabel")
	h, listed, _ := startHelper(t, sc)
	if _, err := invoke(h, "agent", "helper.relabel", `{}`); err != nil {
		t.Fatal(err)
	}
	<-listed
	if _, err := invoke(h, "agent", "helper.count", `{}`); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "now make it read-only, not effectful") {
		t.Fatalf("err = %v, want ErrUnavailable naming the classes", err)
	}
	if _, err := os.Stat(counter); !os.IsNotExist(err) {
		t.Fatal("the relabeled tool was called")
	}
}
