package jsexec

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// limitCases trip each limit; every one must end in a tool failure (an
// Outcome, not a Go error) while the test process goes on, and the
// executor must then run a normal script.
var limitCases = []struct {
	name string
	lim  Limits
	code string
	kind string
	says string
	// calls is the number of callbacks Invoke must have seen, or at most
	// seen with atMost (calls dispatched when the limit tripped may be
	// cancelled before they reach Invoke).
	calls  int
	atMost bool
}{
	{name: "time: infinite loop", lim: Limits{Timeout: 200 * time.Millisecond}, code: `for (;;) {}`, kind: "timeout", says: "time limit of 200ms"},
	{name: "time: loop in catch and finally", lim: Limits{Timeout: 200 * time.Millisecond}, code: `for (;;) { try { for (;;) {} } catch (e) {} finally { continue } }`, kind: "timeout", says: "time limit"},
	{name: "time: callback never resolves", lim: Limits{Timeout: 200 * time.Millisecond}, code: `await caps.hang({}); return 1`, kind: "timeout", says: "time limit", calls: 1, atMost: true},
	{name: "stack: recursion", lim: Limits{MaxCallStackSize: 500}, code: `function f(n) { return f(n + 1) + 1 } return f(0)`, kind: "limit", says: "call stack exceeded 500 frames"},
	{name: "stack: recursion through a builtin", lim: Limits{MaxCallStackSize: 500}, code: `function g(n) { return [n].map(x => g(x + 1)) } return g(0)`, kind: "limit", says: "call stack"},
	{name: "stack: caught recursion still fails", lim: Limits{MaxCallStackSize: 500}, code: `function f() { try { return f() } catch (e) { return 0 } } return f()`, kind: "limit", says: "call stack"},
	{name: "callbacks per script", lim: Limits{MaxCallbacks: 5}, code: `for (let i = 0; i < 10; i++) await caps.echo({i}); return 1`, kind: "limit", says: "more than 5 capability calls", calls: 5},
	{name: "callbacks per script, caught", lim: Limits{MaxCallbacks: 5}, code: `try { for (let i = 0; i < 10; i++) await caps.echo({i}) } catch (e) { return "caught" }`, kind: "limit", says: "more than 5", calls: 5},
	{name: "pending callbacks", lim: Limits{MaxPendingCallbacks: 3}, code: `await Promise.all([1, 2, 3, 4].map(i => caps.hang({i}))); return 1`, kind: "limit", says: "more than 3 capability calls pending", calls: 3, atMost: true},
	{name: "source size", lim: Limits{MaxSourceBytes: 100}, code: `return "` + strings.Repeat("x", 200) + `"`, kind: "limit", says: "the limit is 100 bytes", calls: 0},
	{name: "result size", lim: Limits{MaxResultBytes: 1000}, code: `return "x".repeat(2000)`, kind: "limit", says: "the limit is 1000 bytes"},
	{name: "result size: many small values", lim: Limits{MaxResultBytes: 1000}, code: `return Array.from({length: 1000}, (_, i) => ({i}))`, kind: "limit", says: "the limit is 1000 bytes"},
	{name: "console output", lim: Limits{MaxConsoleBytes: 1000}, code: `for (;;) console.log("x".repeat(100))`, kind: "limit", says: "more than 1000 bytes to the console"},
	{name: "memory: growing array", lim: memoryBomb, code: `const a = []; for (;;) a.push(new Array(1e5).fill(1))`, kind: "limit", says: "memory limit exceeded"},
	{name: "memory: string doubling", lim: memoryBomb, code: `let s = "x"; for (;;) s += s`, kind: "limit", says: "memory limit exceeded"},
	{name: "memory: objects in a map", lim: memoryBomb, code: `const m = new Map(); for (let i = 0; ; i++) m.set(i, {i, s: "v" + i})`, kind: "limit", says: "memory limit exceeded"},
}

func TestLimits(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tc := range limitCases {
				t.Run(tc.name, func(t *testing.T) {
					leakCheck(t)
					fk := newFake()
					ex := newTestExecutor(t, newTestFactory(t, mode, tc.lim), fk)
					out := run(t, ex, "limit", tc.code)
					checkStep(t, out, step{kind: tc.kind, says: []string{tc.says}})
					if n := len(fk.seen()); n > tc.calls || (!tc.atMost && n != tc.calls) {
						t.Errorf("%d callbacks reached Invoke, want %d (at most: %v)", n, tc.calls, tc.atMost)
					}
					// The executor goes on.
					out = run(t, ex, "after", `return "alive"`)
					checkStep(t, out, step{want: `"alive"`})
				})
			}
		})
	}
}

// TestLimitDefaults pins the documented defaults.
func TestLimitDefaults(t *testing.T) {
	f, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if f.Mode() != ModeWorker {
		t.Errorf("default mode %v", f.Mode())
	}
	want := Limits{Timeout: 30 * time.Second, MaxCallStackSize: 5000, MaxCallbacks: 1000, MaxPendingCallbacks: 32,
		MaxSourceBytes: 128 << 10, MaxResultBytes: 1 << 20, MaxLogLines: 200, MaxLogBytes: 64 << 10,
		MaxConsoleBytes: 4 << 20, MemoryBytes: 256 << 20}
	if f.Limits() != want {
		t.Errorf("defaults %+v, want %+v", f.Limits(), want)
	}
	if _, err := New(WithLimits(Limits{Timeout: -1})); err == nil {
		t.Error("negative timeout accepted")
	}
	if _, err := New(WithMode(Mode(7))); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestCancel: a cancelled context interrupts a running or waiting script
// and Execute returns an error wrapping ctx.Err(), never hangs, and the
// next script runs. In ModeWorker a script interrupted while waiting for
// a callback hands its worker back for the next script; one interrupted
// while running JavaScript (its realm may be broken, see realm.broken)
// has its worker replaced.
func TestCancel(t *testing.T) {
	cases := []struct {
		name, code string
		replaced   bool
	}{
		{"busy", `for (;;) {}`, true},
		{"awaiting a callback", `await caps.hang({}); return 1`, false},
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					leakCheck(t)
					fk := newFake()
					started := make(chan struct{}, 1)
					fk.onInvoke = func(c string) {
						if c == "hang" {
							started <- struct{}{}
						}
					}
					ex := newTestExecutor(t, newTestFactory(t, mode, Limits{}), fk)
					w, _ := ex.(*workerExecutor)
					// A cancel while the script awaits a callback keeps the
					// worker; one that lands while it still runs JavaScript
					// (the call is made, the script not yet suspended in its
					// await: a loaded machine can hold it there) replaces
					// it. The test sees the call start, not the suspension,
					// so a replacement there is tried again, up to 20 times:
					// a worker replaced by every cancel of an await fails it.
					for attempt := 1; ; attempt++ {
						run(t, ex, "warm", `return 0`) // the worker is up
						before := 0
						if w != nil {
							before = w.pid()
						}
						ctx, cancel := context.WithCancel(context.Background())
						go func() {
							if strings.Contains(tc.code, "caps.") {
								<-started
							} else {
								time.Sleep(50 * time.Millisecond)
							}
							cancel()
						}()
						out, err := ex.Execute(ctx, jstool.Script{CallID: "c", Code: tc.code})
						if !errors.Is(err, context.Canceled) {
							t.Fatalf("err = %v, want context.Canceled", err)
						}
						if out.Failure == nil || out.Failure.Kind != "cancelled" {
							t.Fatalf("outcome %+v", out.Failure)
						}
						checkStep(t, run(t, ex, "after", `return await caps.echo({a: 1})`), step{want: `{"a":1}`})
						if w == nil {
							break
						}
						replaced := w.pid() != before
						if replaced && !tc.replaced && attempt < 20 {
							continue
						}
						if replaced != tc.replaced {
							t.Errorf("worker %d, then %d: replaced %v, want %v", before, w.pid(), replaced, tc.replaced)
						}
						break
					}
				})
			}
			t.Run("already cancelled", func(t *testing.T) {
				leakCheck(t)
				ex := newTestExecutor(t, newTestFactory(t, mode, Limits{}), newFake())
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if _, err := ex.Execute(ctx, jstool.Script{Code: `return 1`}); !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v", err)
				}
			})
		})
	}
}

// TestClose: Close is idempotent, Execute after it is ErrClosed, and Close
// during a script interrupts it.
func TestClose(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			leakCheck(t)
			f := newTestFactory(t, mode, Limits{})
			fk := newFake()
			ex, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: fk.infos(), Invoke: fk.invoke})
			if err != nil {
				t.Fatal(err)
			}
			run(t, ex, "warm", `return 1`)
			done := make(chan error, 1)
			started := make(chan struct{}, 1)
			fk.onInvoke = func(string) { started <- struct{}{} }
			go func() {
				_, err := ex.Execute(context.Background(), jstool.Script{Code: `await caps.hang({})`})
				done <- err
			}()
			<-started
			if err := ex.Close(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, ErrClosed) {
				t.Errorf("interrupted Execute: %v, want ErrClosed", err)
			}
			if err := ex.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if _, err := ex.Execute(context.Background(), jstool.Script{Code: `return 1`}); !errors.Is(err, ErrClosed) {
				t.Errorf("Execute after Close: %v", err)
			}
			if w, ok := ex.(*workerExecutor); ok && !processGone(w.pid()) {
				t.Errorf("worker %d not reaped", w.pid())
			}
		})
	}
}
