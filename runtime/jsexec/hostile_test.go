package jsexec

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/internal/syncbuf"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/schema"
)

// C42: the realm has no ambient authority, and a hostile script cannot
// take the host down. hostileCases must each end in a tool failure without crashing the test
// process or leaking a goroutine or a process; the executor then runs a
// normal script. Limits are the defaults except where a case needs to trip
// one quickly.
var hostileCases = []struct {
	name       string
	lim        Limits
	code       string
	kind       string
	says       string
	workerOnly bool
}{
	{name: "infinite loop", lim: Limits{Timeout: 300 * time.Millisecond}, code: `while (true) {}`, kind: "timeout"},
	{name: "deep recursion", code: `const f = n => f(n + 1) + 1; return f(0)`, kind: "limit", says: "call stack"},
	{name: "recursion through toString", code: `const o = {toString() { return "" + o }}; return "" + o`, kind: "limit", says: "call stack"},
	{name: "recursion through a getter", code: `const o = {get x() { return this.x }}; return o.x`, kind: "limit", says: "call stack"},
	{name: "string doubling", lim: memoryBomb, code: `let s = "ab"; while (true) s = s + s`, kind: "limit", says: "memory limit exceeded"},
	{name: "giant arrays", lim: memoryBomb, code: `const keep = []; while (true) keep.push(Array.from({length: 1e5}, (_, i) => i))`, kind: "limit", says: "memory limit exceeded"},
	{name: "huge return string", code: `return "x".repeat(20 << 20)`, kind: "limit", says: "returned value"},
	{name: "huge return array", code: `return new Array(1e6).fill("abc")`, kind: "limit", says: "returned value"},
	{name: "return value whose toJSON loops", lim: Limits{Timeout: 300 * time.Millisecond}, code: `return {toJSON() { for (;;) {} }}`, kind: "timeout"},
	{name: "return value whose toJSON throws", code: `return {toJSON() { throw new RangeError("nope") }}`, kind: "exception", says: "RangeError: nope"},
	{name: "proxy trap loops during serialization", lim: Limits{Timeout: 300 * time.Millisecond}, code: `return new Proxy({}, {ownKeys() { for (;;) {} }})`, kind: "timeout"},
	{name: "argument getter loops", lim: Limits{Timeout: 300 * time.Millisecond}, code: `await caps.echo({get x() { for (;;) {} }})`, kind: "timeout"},
	{name: "console argument loops", lim: Limits{Timeout: 300 * time.Millisecond}, code: `console.log({toJSON() { for (;;) {} }})`, kind: "timeout"},
	{name: "thrown value loops when described", lim: Limits{Timeout: 300 * time.Millisecond}, code: `throw {get stack() { for (;;) {} }}`, kind: "timeout"},
	{name: "rejection loops in a then job", lim: Limits{Timeout: 300 * time.Millisecond}, code: `await caps.echo({}).then(() => { for (;;) {} })`, kind: "timeout"},
	{name: "promise storm", lim: Limits{Timeout: 300 * time.Millisecond}, code: `const spin = () => Promise.resolve().then(spin); spin(); await new Promise(() => {})`, kind: "timeout"},
	// The regular expression cannot be interrupted: the worker is killed
	// after the grace. Its time limit is long enough that the script is in
	// the expression when it passes, however loaded the machine: with 300ms,
	// a worker descheduled before the script reached it (fresh-clone-check
	// beside stress-ng) was interrupted at an instruction boundary instead,
	// and answered "exceeded its time limit".
	{name: "catastrophic regular expression", lim: Limits{Timeout: 5 * time.Second}, code: `return /^(a+)+(?=c)/.test("a".repeat(60) + "b")`, kind: "timeout", says: "did not stop", workerOnly: true},
	{name: "deeply nested return value", code: `let a = []; for (let i = 0; i < 2e4; i++) a = [a]; return a`, kind: "exception", says: "nested more than 1000 levels deep"},
	{name: "deeply nested argument", code: `let a = []; for (let i = 0; i < 2e4; i++) a = [a]; return await caps.echo({a})`, kind: "exception", says: "nested more than 1000 levels deep"},
	{name: `"x".repeat(2**31-1)`, lim: memoryBomb, code: `return "x".repeat(2**31 - 1).length`, kind: "limit", says: "memory limit exceeded", workerOnly: true},
	{name: "new Array(2**32-1).fill(0)", lim: memoryBomb, code: `return new Array(2**32 - 1).fill(0).length`, kind: "limit", says: "memory limit exceeded", workerOnly: true},
}

// memoryBomb are the limits of a case that must end on the memory limit:
// a small one, and a timeout no machine reaches first, however loaded (the
// default 30 s timeout ended new Array(2**32-1).fill(0) before the default
// memory limit on a machine busy with other builds).
var memoryBomb = Limits{MemoryBytes: 64 << 20, Timeout: 10 * time.Minute}

func TestHostileScripts(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tc := range hostileCases {
				if tc.workerOnly && mode != ModeWorker {
					continue // in process these stall a goroutine or kill the process (see doc.go)
				}
				t.Run(tc.name, func(t *testing.T) {
					leakCheck(t)
					f := newTestFactory(t, mode, tc.lim)
					if tc.workerOnly {
						f.s.grace = time.Second // the worker cannot answer: it is killed after this
					}
					ex := newTestExecutor(t, f, newFake())
					out := run(t, ex, "hostile", tc.code)
					st := step{kind: tc.kind}
					if tc.says != "" {
						st.says = []string{tc.says}
					}
					checkStep(t, out, st)
					checkStep(t, run(t, ex, "after", `return "alive"`), step{want: `"alive"`})
				})
			}
		})
	}
}

// TestPanickingCapability: a panic in Invoke rejects that call's promise
// with a generic message; the panic value (which bypassed the invoker's
// redaction) goes only to the log.
func TestPanickingCapability(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			leakCheck(t)
			var logBuf syncbuf.Buffer
			f := newTestFactory(t, mode, Limits{})
			f.s.log = slog.New(slog.NewTextHandler(&logBuf, nil))
			ex := newTestExecutor(t, f, newFake())
			out := run(t, ex, "p", `try { await caps.panic({}) } catch (e) { return [e instanceof Error, e.message] }`)
			checkStep(t, out, step{want: `[true, "caps.panic: internal error in the host"]`})
			out = run(t, ex, "p2", `await caps.panic({}); return 1`)
			checkStep(t, out, step{kind: "exception", says: []string{"internal error in the host"}})
			if strings.Contains(out.Failure.Message, "sk-PANIC") {
				t.Errorf("the panic value reached the script: %q", out.Failure.Message)
			}
			if !strings.Contains(logBuf.String(), "sk-PANIC") {
				t.Errorf("the panic was not logged: %q", logBuf.String())
			}
		})
	}
}

// TestCapabilityReturningASecret: JavaScript sees exactly what Invoke
// returns. Redaction is the invoker's job: through jstool.NewInvoker with a
// redactor, the secret never reaches the realm.
func TestCapabilityReturningASecret(t *testing.T) {
	const secret = "sk-live-0123456789"
	sch, err := schema.Compile([]byte(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	backend := backendFunc(func(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
		return jstool.Value{JSON: json.RawMessage(`{"token":"` + secret + `","user":"ann"}`)}, nil
	})
	caps := []jstool.Capability{{Info: jstool.CapabilityInfo{Name: "vault.read", InputSchema: json.RawMessage(`{"type":"object"}`)}, Schema: sch}}
	code := `const v = await caps.vault.read({}); console.log(v.token); return v`
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			leakCheck(t)
			f := newTestFactory(t, mode, Limits{})

			raw := jstool.NewInvoker(caps, backend, redactFunc(func(s string) string { return s }), nil)
			ex, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: []jstool.CapabilityInfo{caps[0].Info}, Invoke: raw.Invoke})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			out := run(t, ex, "raw", code)
			checkStep(t, out, step{want: `{"token":"` + secret + `","user":"ann"}`})

			iv := jstool.NewInvoker(caps, backend, redactFunc(func(s string) string { return strings.ReplaceAll(s, secret, "[REDACTED]") }), nil)
			ex2, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: []jstool.CapabilityInfo{caps[0].Info}, Invoke: iv.Invoke})
			if err != nil {
				t.Fatal(err)
			}
			defer ex2.Close()
			out = run(t, ex2, "redacted", code)
			checkStep(t, out, step{want: `{"token":"[REDACTED]","user":"ann"}`})
			if strings.Contains(string(out.Value), secret) || strings.Contains(out.Logs[0].Text, secret) {
				t.Errorf("the secret reached JavaScript: %s %v", out.Value, out.Logs)
			}
			recs := iv.Take("redacted")
			if len(recs) != 1 || recs[0].Seq != 1 || recs[0].Outcome != "ok" || recs[0].Capability != "vault.read" {
				t.Errorf("attribution %+v", recs)
			}
		})
	}
}

// TestFailedScriptListsCompletedCallbacks: the outcome of a failed script
// and the invoker's attribution give the C22 tool error.
func TestFailedScriptListsCompletedCallbacks(t *testing.T) {
	sch, err := schema.Compile([]byte(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	backend := backendFunc(func(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
		return jstool.Value{JSON: json.RawMessage(`{"ok":true}`)}, nil
	})
	caps := []jstool.Capability{{Info: jstool.CapabilityInfo{Name: "mail.send", InputSchema: json.RawMessage(`{"type":"object"}`)}, Schema: sch}}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			leakCheck(t)
			iv := jstool.NewInvoker(caps, backend, redactFunc(func(s string) string { return s }), nil)
			f := newTestFactory(t, mode, Limits{})
			ex, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: []jstool.CapabilityInfo{caps[0].Info}, Invoke: iv.Invoke})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			out := run(t, ex, "s1", `await caps.mail.send({to: "a"}); await caps.mail.send({to: "b"}); throw new Error("then it broke")`)
			res := jstool.Format(out, iv.Take("s1"))
			if !res.IsError || !strings.Contains(res.Content, "#1 caps.mail.send") || !strings.Contains(res.Content, "#2 caps.mail.send") || !strings.Contains(res.Content, "Do not rerun") {
				t.Errorf("tool result %q", res.Content)
			}
		})
	}
}

type backendFunc func(ctx context.Context, inv jstool.Invocation) (jstool.Value, error)

func (f backendFunc) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	return f(ctx, inv)
}

type redactFunc func(string) string

func (f redactFunc) Redact(s string) string { return f(s) }

// TestInProcessStuckBuiltin: a builtin Interrupt cannot reach (a
// backtracking regular expression) holds the in-process realm past its
// deadline; Execute returns anyway and the next script gets a fresh realm
// on a new host.
// The abandoned goroutine finishes by itself (the leak check waits for it).
func TestInProcessStuckBuiltin(t *testing.T) {
	leakCheck(t)
	f := newTestFactory(t, ModeInProcess, Limits{Timeout: 50 * time.Millisecond})
	f.s.grace = 100 * time.Millisecond
	ex := newTestExecutor(t, f, newFake())
	n := "24" // ~1.5 s of backtracking; the race detector makes it ~10x slower
	if raceEnabled {
		n = "20"
	}
	out := run(t, ex, "stuck", `return /^(a+)+(?=c)/.test("a".repeat(`+n+`) + "b")`)
	checkStep(t, out, step{kind: "timeout", says: []string{"cannot be interrupted", "realm was abandoned"}})
	checkStep(t, run(t, ex, "after", `return await caps.echo({a: 1})`), step{want: `{"a":1}`})
}

// TestNewExecutorChecks: NewExecutor refuses a config without Invoke and a
// cancelled context.
func TestNewExecutorChecks(t *testing.T) {
	f := newTestFactory(t, ModeInProcess, Limits{})
	if _, err := f.NewExecutor(t.Context(), jstool.Config{}); err == nil {
		t.Error("nil Invoke accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.NewExecutor(ctx, jstool.Config{Invoke: newFake().invoke}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
}
