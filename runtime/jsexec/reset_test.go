package jsexec

import (
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
)

// resetCases each trip a limit. Before realms were replaced, every one of
// them left its realm broken: goja kept part of the interrupted call stack,
// after which no promise job ran again (every later awaiting script failed
// with "awaits a promise that can never settle"), and the memory the
// script held stayed reachable (a worker's later scripts failed on the
// memory limit at once, pure loops too). Now no realm runs a second
// script, and a worker whose realm broke runs no other.
var resetCases = []struct {
	name string
	lim  Limits
	code string
	kind string
	says string
}{
	{name: "callbacks per script", lim: Limits{MaxCallbacks: 5}, code: `for (let i = 0; i < 10; i++) await caps.echo({i}); return 1`, kind: "limit", says: "more than 5 capability calls"},
	{name: "pending callbacks", lim: Limits{MaxPendingCallbacks: 3}, code: `await Promise.all([1, 2, 3, 4].map(i => caps.hang({i}))); return 1`, kind: "limit", says: "more than 3 capability calls pending"},
	// The default memory limit: in a worker the heap watchdog trips first
	// (a smaller limit lets the address-space limit kill the worker, which
	// has always meant a fresh realm).
	{name: "memory", lim: Limits{Timeout: 10 * time.Minute}, code: `const m = new Map(); for (let i = 0; ; i++) m.set(i, {i, s: "v" + i})`, kind: "limit", says: "memory limit exceeded"},
	{name: "time, running", lim: Limits{Timeout: 200 * time.Millisecond}, code: `for (;;) {}`, kind: "timeout", says: "time limit of 200ms"},
	{name: "time, awaiting a callback", lim: Limits{Timeout: 200 * time.Millisecond}, code: `await caps.hang({}); return 1`, kind: "timeout", says: "time limit of 200ms"},
	{name: "call stack", lim: Limits{MaxCallStackSize: 500}, code: `function f(n) { return f(n + 1) + 1 } return f(0)`, kind: "limit", says: "call stack exceeded 500 frames"},
	{name: "console output", lim: Limits{MaxConsoleBytes: 1000}, code: `for (;;) console.log("x".repeat(100))`, kind: "limit", says: "more than 1000 bytes to the console"},
}

// TestLimitTripResetsRealm: after a script that trips a limit, the next
// scripts of the same executor run in a fresh realm where awaiting a
// callback works, and in ModeWorker in a fresh worker: the one whose realm
// broke is killed, never handed to another script.
func TestLimitTripResetsRealm(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			for _, tc := range resetCases {
				t.Run(tc.name, func(t *testing.T) {
					leakCheck(t)
					fk := newFake()
					ex := newTestExecutor(t, newTestFactory(t, mode, tc.lim), fk)
					w, _ := ex.(*workerExecutor)
					checkStep(t, run(t, ex, "before", `globalThis.kept = "before"; return (await caps.echo({kept})).kept`), step{want: `"before"`})
					pid := 0
					if w != nil {
						pid = w.pid()
					}
					checkStep(t, run(t, ex, "trip", tc.code), step{kind: tc.kind, says: []string{tc.says}})
					if w != nil && w.pid() != pid {
						t.Errorf("the script that tripped ran in worker %d, not %d", w.pid(), pid)
					}
					checkStep(t, run(t, ex, "alive", `return "alive"`), step{want: `"alive"`})
					if w != nil {
						if w.pid() == pid {
							t.Errorf("worker %d ran another script after its realm broke", pid)
						}
						if !processGone(pid) {
							t.Errorf("worker %d whose realm broke is not reaped", pid)
						}
					}
					checkStep(t, run(t, ex, "await", `return await caps.echo({a: 1})`), step{want: `{"a":1}`})
					checkStep(t, run(t, ex, "gone", `return typeof globalThis.kept`), step{want: `"undefined"`})
				})
			}
		})
	}
}

// TestPrototypePollutionDoesNotReachHost: what a script does to the
// realm's builtins changes neither the arguments the host receives from
// its capability calls nor its result. The realm keeps its pollution (its
// own business) until the script ends.
func TestPrototypePollutionDoesNotReachHost(t *testing.T) {
	const pollute = `
		Object.prototype.toJSON = function () { return {evil: 1} };
		Object.defineProperty(Array.prototype, "toJSON", {get() { return () => "evil array" }, configurable: true});
		Object.defineProperty(Object.prototype, "injected", {get() { return "evil getter" }, enumerable: true, configurable: true});
		Array.prototype[1] = "evil hole";
		Date.prototype.toJSON = () => "evil date";
		Date.prototype.toISOString = () => "evil iso";
		Number.prototype.valueOf = () => 666;
		String.prototype.valueOf = () => "evil string";
		String.prototype.toString = () => "evil string";
		BigInt.prototype.toJSON = () => "evil bigint";
		JSON.stringify = () => '{"evil":1}';
		`
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			leakCheck(t)
			fk := newFake()
			ex := newTestExecutor(t, newTestFactory(t, mode, Limits{}), fk)
			checkStep(t, run(t, ex, "pollute", pollute+`return "polluted"`), step{want: `"polluted"`})

			checkStep(t, run(t, ex, "echo", pollute+`return await caps.echo({a: 1})`), step{want: `{"a":1}`})
			calls := fk.seen()
			if len(calls) != 1 || calls[0].args != `{"a":1}` {
				t.Fatalf("the host received %+v, want exactly {\"a\":1}", calls)
			}

			const rich = `{"list":[1,null,3,null],"when":"1970-01-01T00:00:00.000Z","bad":null,"n":2,"s":"s","b":false,` +
				`"nested":{"x":[true,null,{"y":"z"}]},"own":"key own","text":"é\n\"q\"\\"}`
			checkStep(t, run(t, ex, "rich", pollute+`return await caps.echo({
				list: [1, , 3, undefined], when: new Date(0), bad: new Date(NaN), n: new Number(2), s: new String("s"),
				b: new Boolean(false), nested: {x: [true, null, {y: "z"}]}, own: {toJSON(k) { return "key " + k }},
				f() {}, u: undefined, text: "é\n\"q\"\\"})`), step{want: rich})
			calls = fk.seen()
			if len(calls) != 2 || calls[1].args != rich {
				t.Fatalf("the host received %s, want exactly %s", calls[len(calls)-1].args, rich)
			}

			checkStep(t, run(t, ex, "bigint", pollute+`try { await caps.echo({n: 1n}); return "sent" } catch (e) { return e instanceof TypeError }`), step{want: `true`})
			checkStep(t, run(t, ex, "realm", pollute+`return [({}).injected, [0, , 2][1], JSON.stringify({})]`), step{want: `["evil getter", "evil hole", "{\"evil\":1}"]`})
			checkStep(t, run(t, ex, "next", `return [({}).injected, [0, , 2][1], JSON.stringify({})]`), step{want: `[null, null, "{}"]`})
			if n := len(fk.seen()); n != 2 {
				t.Errorf("%d calls reached the host, want 2", n)
			}
		})
	}
}

// TestHostJSONMatchesStringify: on values no script has tampered with,
// hostJSON writes what JSON.stringify writes, except for toJSON on a
// prototype (ignored) and nesting past maxJSONDepth (a TypeError).
func TestHostJSONMatchesStringify(t *testing.T) {
	r, err := newRealm(nil, Limits{}.withDefaults(), false)
	if err != nil {
		t.Fatal(err)
	}
	exprs := []string{
		`undefined`, `null`, `true`, `0`, `-0`, `1.5`, `-1e-7`, `1e21`, `2**53 + 2`, `NaN`, `-Infinity`,
		`""`, `"plain"`, `"q\"b\\s/\b\f\n\r\t\u0001\u001f\u007f"`, `"é ü 日本 😀"`, `"\ud800 lone \udfff"`, `"\u2028\u2029"`,
		`[]`, `{}`, `[1, "a", null, true, [], {}]`, `[undefined, () => 1, Symbol("s")]`, `new Array(3)`, `[1, , 3]`,
		`{a: undefined, b: () => 1, c: Symbol("s"), d: 1}`, `{[Symbol("k")]: 1, k: 2}`, `{b: 1, a: 2, 10: 3, 2: 4}`,
		`Object.defineProperty({a: 1}, "hidden", {value: 2, enumerable: false})`,
		`{get g() { return "got" }}`, `Object.create({inherited: 1}, {own: {value: 2, enumerable: true}})`,
		`Object.create(null)`, `new Date(0)`, `new Date(NaN)`, `[new Number(3), new String("x"), new Boolean(true)]`,
		`{toJSON(k) { return "key:" + k }}`, `[{toJSON(k) { return k }}, {toJSON(k) { return k }}]`, `{a: {toJSON(k) { return [k] }}}`,
		`{toJSON() { return undefined }}`, `{toJSON: 5}`, `new Map([[1, 2]])`, `/re/g`, `new Error("e")`, `new Uint8Array([1, 2])`,
		`JSON.rawJSON("123")`, `{r: JSON.rawJSON('"s"')}`, `new Proxy({a: 1}, {})`, `new Proxy([1, 2], {})`,
		`(() => { const o = {}; return [o, o, {o}] })()`, `(() => { let a = []; for (let i = 0; i < 999; i++) a = [a]; return a })()`,
		`{"\ud800": 1}`,
	}
	for _, e := range exprs {
		v, err := r.vm.RunString("(" + e + ")")
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		want, err := r.stringify(goja.Undefined(), v)
		if err != nil {
			t.Fatalf("%s: JSON.stringify: %v", e, err)
		}
		text, defined, tooBig, err := r.hostJSON(v, 1<<20)
		if err != nil || tooBig {
			t.Errorf("%s: hostJSON: %v (too big: %v)", e, err, tooBig)
			continue
		}
		if goja.IsUndefined(want) {
			if defined {
				t.Errorf("%s: hostJSON wrote %s, JSON.stringify gave undefined", e, text)
			}
			continue
		}
		if e == `{"\ud800": 1}` {
			// Go cannot spell a lone surrogate key: it is left out.
			if string(text) != `{}` {
				t.Errorf("%s: hostJSON wrote %s", e, text)
			}
			continue
		}
		if !defined || string(text) != want.String() {
			t.Errorf("%s: hostJSON wrote %s (defined %v), JSON.stringify %s", e, text, defined, want.String())
		}
	}

	// Where they differ on purpose.
	differ := []struct{ expr, want string }{
		{`(() => { class P { toJSON() { return "from the prototype" } }; const p = new P(); p.a = 1; return p })()`, `{"a":1}`},
	}
	for _, d := range differ {
		v, err := r.vm.RunString(d.expr)
		if err != nil {
			t.Fatal(err)
		}
		text, _, _, err := r.hostJSON(v, 1<<20)
		if err != nil || string(text) != d.want {
			t.Errorf("%s: hostJSON wrote %s (%v), want %s", d.expr, text, err, d.want)
		}
	}
	errs := []struct{ expr, says string }{
		{`(() => { const a = {}; a.a = a; return a })()`, "circular"},
		{`({n: 1n})`, "BigInt"},
		{`[Object(1n)]`, "BigInt"},
		{`(() => { let a = []; for (let i = 0; i < 1000; i++) a = [a]; return a })()`, "nested more than 1000 levels deep"},
		{`({get x() { throw new RangeError("from a getter") }})`, "from a getter"},
	}
	for _, c := range errs {
		v, err := r.vm.RunString(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _, err = r.hostJSON(v, 1<<20)
		ex, ok := err.(*goja.Exception)
		if !ok || !strings.Contains(ex.Value().String(), c.says) {
			t.Errorf("%s: error %v, want an exception saying %q", c.expr, err, c.says)
		}
	}
	v, err := r.vm.RunString(`new Array(1e6).fill("abc")`)
	if err != nil {
		t.Fatal(err)
	}
	text, _, tooBig, err := r.hostJSON(v, 1000)
	if err != nil || !tooBig || len(text) > 1010 {
		t.Errorf("bounded walk: %d bytes, too big %v, err %v", len(text), tooBig, err)
	}
}
