package jsexec

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// step is one script of a conformance case, run on the case's executor.
type step struct {
	code string
	// want is the expected result JSON when kind is "".
	want string
	// kind is the expected Failure.Kind ("" for success).
	kind string
	// says lists phrases the failure message must contain: the message is
	// what the model reads, so its content is the behaviour under test.
	says []string
	// check inspects the outcome further.
	check func(t *testing.T, out jstool.Outcome, fk *fake)
}

// conformanceCase is a sequence of scripts on one fresh executor.
type conformanceCase struct {
	name  string
	lim   Limits
	setup func(fk *fake)
	steps []step
}

// conformanceCases is the behaviour both modes must share.
var conformanceCases = []conformanceCase{
	{name: "json value", steps: []step{{code: `return {a: 1, b: [true, null, "x"], c: "é", d: 1.5}`, want: `{"a":1,"b":[true,null,"x"],"c":"é","d":1.5}`}}},
	{name: "undefined is null", steps: []step{{code: `return undefined`, want: `null`}, {code: `let x = 1`, want: `null`}}},
	{name: "function is null", steps: []step{{code: `return () => 1`, want: `null`}}},
	{name: "toJSON", steps: []step{{code: `return {toJSON() { return "custom" }}`, want: `"custom"`}}},
	{name: "cycle fails", steps: []step{{code: `const a = {}; a.self = a; return a`, kind: "exception", says: []string{"cannot be serialized as JSON", "circular"}}}},
	{name: "bigint fails", steps: []step{{code: `return {n: 10n}`, kind: "exception", says: []string{"cannot be serialized as JSON", "BigInt"}}}},
	{name: "syntax error", steps: []step{{code: `return (`, kind: "exception", says: []string{"SyntaxError"}}}},
	{name: "throw error", steps: []step{{code: `throw new Error("boom")`, kind: "exception", says: []string{"Uncaught Error: boom", "run_js:1"}}}},
	{name: "throw string", steps: []step{{code: `throw "oops"`, kind: "exception", says: []string{"Uncaught oops"}}}},
	{name: "throw object", steps: []step{{code: `throw {code: 42}`, kind: "exception", says: []string{`Uncaught {"code":42}`}}}},
	{name: "throw undefined", steps: []step{{code: `throw undefined`, kind: "exception", says: []string{"Uncaught undefined"}}}},
	{name: "throw null", steps: []step{{code: `throw null`, kind: "exception", says: []string{"Uncaught null"}}}},
	{name: "throw unprintable", steps: []step{{code: `throw {toString() { throw 1 }, toJSON() { throw 2 }}`, kind: "exception", says: []string{"Uncaught [unprintable object]"}}}},
	{name: "throw after await", steps: []step{{code: `await caps.echo({}); throw new TypeError("late")`, kind: "exception", says: []string{"TypeError: late"}}}},
	{name: "unhandled rejection", steps: []step{{code: `Promise.reject(new Error("lost")); return 1`, kind: "exception", says: []string{"unhandled promise rejection", "lost"}}}},
	{name: "unawaited failing callback", steps: []step{{code: `caps.fail({}); return 1`, kind: "exception", says: []string{"unhandled promise rejection", "backend says no"}}}},
	{name: "handled rejection", steps: []step{{code: `const p = Promise.reject(new Error("x")); try { await p } catch (e) { return e.message }`, want: `"x"`}}},
	{name: "never settles", steps: []step{{code: `await new Promise(() => {}); return 1`, kind: "exception", says: []string{"can never settle"}}}},
	{name: "100 sequential awaits", steps: []step{{
		code: `let s = 0; for (let i = 0; i < 100; i++) { s = (await caps.math.add({a: s, b: 1})).sum } return s`,
		want: `100`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			calls := fk.seen()
			if len(calls) != 100 {
				t.Fatalf("%d calls, want 100", len(calls))
			}
			for i, c := range calls {
				if c.seq != i+1 || c.capability != "math.add" || c.callID != "call-0" {
					t.Fatalf("call %d = %+v", i, c)
				}
			}
		},
	}}},
	{name: "parallel Promise.all", setup: func(fk *fake) { fk.barrier = 10 }, steps: []step{{
		code: `return await Promise.all([...Array(10).keys()].map(i => caps.barrier({i})))`,
		want: `[{"i":0},{"i":1},{"i":2},{"i":3},{"i":4},{"i":5},{"i":6},{"i":7},{"i":8},{"i":9}]`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			if n := fk.maxInFlight(); n != 10 {
				t.Errorf("max concurrent callbacks %d, want 10", n)
			}
		},
	}}},
	{name: "seq restarts per script", steps: []step{
		{code: `await caps.echo({}); await caps.echo({}); return 0`, want: `0`},
		{code: `await caps.echo({}); return 0`, want: `0`, check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			calls := fk.seen()
			got := fmt.Sprintf("%d %d %d %s", calls[0].seq, calls[1].seq, calls[2].seq, calls[2].callID)
			if got != "1 2 1 call-1" {
				t.Errorf("seqs %s, want 1 2 1 call-1", got)
			}
		}},
	}},
	{name: "callback error is an Error", steps: []step{{code: `try { await caps.fail({}) } catch (e) { return [e instanceof Error, e.message] }`, want: `[true, "backend says no"]`}}},
	{name: "callback error uncaught", steps: []step{{code: `await caps.fail({}); return 1`, kind: "exception", says: []string{"backend says no"}}}},
	{name: "argument not serializable", steps: []step{{
		code: `const a = {}; a.a = a; try { await caps.echo(a); return "sent" } catch (e) { return e instanceof TypeError }`,
		want: `true`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			if n := len(fk.seen()); n != 0 {
				t.Errorf("%d calls reached Invoke", n)
			}
		},
	}}},
	{name: "argument is JSON", steps: []step{{
		code:  `return await caps.echo({s: "x", n: [1, 2], u: undefined, d: new Date(0)})`,
		want:  `{"s":"x","n":[1,2],"d":"1970-01-01T00:00:00.000Z"}`,
		check: wantArgs(`{"s":"x","n":[1,2],"d":"1970-01-01T00:00:00.000Z"}`),
	}}},
	{name: "no argument is {}", steps: []step{{code: `return await caps.echo()`, want: `{}`, check: wantArgs(`{}`)}}},
	{name: "console", steps: []step{{
		code: `console.log("a", 1, {b: 2}, [1], null, undefined, true); console.info("i"); console.warn("w"); console.error(new Error("e")); return 0`,
		want: `0`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			if len(out.Logs) != 4 || out.LogsDropped != 0 {
				t.Fatalf("logs %+v dropped %d", out.Logs, out.LogsDropped)
			}
			want := []jstool.LogLine{{Level: "log", Text: `a 1 {"b":2} [1] null undefined true`}, {Level: "info", Text: "i"}, {Level: "warn", Text: "w"}}
			if !reflect.DeepEqual(out.Logs[:3], want) {
				t.Errorf("logs %+v, want %+v", out.Logs[:3], want)
			}
			if l := out.Logs[3]; l.Level != "error" || !strings.HasPrefix(l.Text, "Error: e") {
				t.Errorf("error line %+v", l)
			}
		},
	}}},
	{name: "console kept lines", lim: Limits{MaxLogLines: 3}, steps: []step{{
		code: `for (let i = 0; i < 10; i++) console.log(i); return 0`,
		want: `0`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			if len(out.Logs) != 3 || out.LogsDropped != 7 {
				t.Errorf("kept %d dropped %d, want 3 and 7", len(out.Logs), out.LogsDropped)
			}
		},
	}}},
	{name: "console kept bytes", lim: Limits{MaxLogBytes: 10}, steps: []step{{
		code: `console.log("0123456789abcdef"); console.log("next"); return 0`,
		want: `0`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			if len(out.Logs) != 1 || out.LogsDropped != 1 || !strings.HasPrefix(out.Logs[0].Text, "0123456789...") {
				t.Errorf("logs %+v dropped %d", out.Logs, out.LogsDropped)
			}
		},
	}}},
	{name: "logs survive failure", steps: []step{{
		code: `console.log("before"); throw new Error("after")`,
		kind: "exception",
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			if len(out.Logs) != 1 || out.Logs[0].Text != "before" {
				t.Errorf("logs %+v", out.Logs)
			}
		},
	}}},
	{name: "attachments", steps: []step{{
		code: `const a = await caps.attach({}); const b = await caps.attach({}); return a.ok && b.ok`,
		want: `true`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			want := []model.Attachment{{Ref: "blob://1", MediaType: "text/plain", Name: "a.txt", Size: 3}, {Ref: "blob://1", MediaType: "text/plain", Name: "a.txt", Size: 3}}
			if !reflect.DeepEqual(out.Attachments, want) {
				t.Errorf("attachments %+v", out.Attachments)
			}
		},
	}}},
	{name: "each script has a fresh realm", steps: []step{
		{code: `globalThis.counter = 1; var local = 5; implicit = "x"; counter++; return [counter, local, implicit]`, want: `[2, 5, "x"]`},
		{code: `return [typeof counter, typeof local, typeof implicit]`, want: `["undefined", "undefined", "undefined"]`},
	}},
	{name: "a script after an exception", steps: []step{
		{code: `globalThis.kept = "yes"; throw new Error("x")`, kind: "exception"},
		{code: `return [typeof kept, (await caps.echo({a: 1})).a]`, want: `["undefined", 1]`},
	}},
	{name: "no ambient authority", steps: []step{{
		code: `const names = ["require", "process", "fetch", "XMLHttpRequest", "WebSocket", "setTimeout", "setInterval",
			"setImmediate", "queueMicrotask", "clearTimeout", "Deno", "Bun", "module", "exports", "__dirname", "__filename",
			"Buffer", "os", "fs", "navigator", "importScripts", "performance", "global", "load", "print"];
		return names.filter(n => typeof globalThis[n] !== "undefined")`,
		want: `[]`,
	}}},
	{name: "eval and Function reach only the realm", steps: []step{{
		code: `return [eval("typeof require"), Function("return typeof process")(), Function("return this")() === globalThis, eval("caps") === caps]`,
		want: `["undefined", "undefined", true, true]`,
	}}},
	{name: "dynamic import fails", steps: []step{{
		code: `try { await import("fs"); return "imported" } catch (e) { return "refused" }`,
		kind: "exception",
	}}},
	{name: "globals are ECMAScript plus console and caps", steps: []step{{
		code: `return Object.getOwnPropertyNames(globalThis).sort()`,
		check: func(t *testing.T, out jstool.Outcome, fk *fake) {
			var got []string
			if err := json.Unmarshal(out.Value, &got); err != nil {
				t.Fatal(err)
			}
			allowed := map[string]bool{"console": true, "caps": true, "GoError": true}
			for _, n := range strings.Fields(ecmaGlobals) {
				allowed[n] = true
			}
			for _, n := range got {
				if !allowed[n] {
					t.Errorf("unexpected global %q", n)
				}
			}
		},
	}}},
	{name: "caps tree is frozen and prototype-free", steps: []step{{
		code: `return [typeof caps.kv.get, caps.kv.get.name, Object.isFrozen(caps), Object.isFrozen(caps.kv), Object.isFrozen(caps.kv.get),
			Object.getPrototypeOf(caps), Object.getPrototypeOf(caps.kv), Object.keys(caps).sort(), Object.keys(caps.math)]`,
		want: `["function", "caps.kv.get", true, true, true, null, null, ["attach","barrier","echo","fail","hang","kv","math","panic"], ["add"]]`,
	}}},
	{name: "prototype pollution stays in its script's realm", steps: []step{
		{
			code: `
			"use strict";
			const tries = [
				() => { caps.kv.get = () => "fake" },
				() => { caps.kv = {} },
				() => { caps.__proto__ = {evil: 1} },
				() => { Object.setPrototypeOf(caps, {evil: 1}) },
				() => { delete caps.kv },
				() => { Object.defineProperty(caps.kv, "get", {value: () => "fake"}) },
				() => { caps.kv.get.call = () => "fake" },
				() => { globalThis.caps = {} },
			];
			const refused = tries.filter(f => { try { f(); return false } catch (e) { return e instanceof TypeError } }).length;
			Object.prototype.polluted = "yes";
			Object.prototype.evil = "yes";
			Function.prototype.call = function () { return "hijacked" };
			Function.prototype.apply = function () { return "hijacked" };
			JSON.stringify = () => "hijacked";
			JSON.parse = () => "hijacked";
			Error = function () { return "hijacked" };
			Object.freeze = (o) => o;
			const v = await caps.kv.get({key: "k"});
			let err;
			try { await caps.fail({}) } catch (e) { err = e }
			return {refused, v, evil: caps.evil, kvEvil: caps.kv.evil, errMsg: err.message, errOk: Object.getPrototypeOf(err).name};
			`,
			want:  `{"refused": 8, "v": {"value":"from-host"}, "errMsg": "backend says no", "errOk": "Error"}`,
			check: wantArgs(`{"key":"k"}`, `{}`),
		},
		{code: `return [typeof ({}).polluted, Math.max.call(null, 1, 2), JSON.stringify({a: 1}), typeof caps.kv.get]`, want: `["undefined", 2, "{\"a\":1}", "function"]`},
	}},
}

// ecmaGlobals are goja's standard globals.
const ecmaGlobals = `Object Function Array String Number BigInt RegExp Date Boolean Proxy Reflect Error AggregateError
TypeError ReferenceError SyntaxError RangeError EvalError URIError eval Math JSON ArrayBuffer DataView Uint8Array
Uint8ClampedArray Int8Array Uint16Array Int16Array Uint32Array Int32Array Float32Array Float64Array BigInt64Array
BigUint64Array Symbol WeakSet WeakMap Map Set Promise globalThis NaN undefined Infinity isNaN parseInt parseFloat
isFinite decodeURI decodeURIComponent encodeURI encodeURIComponent escape unescape`

// wantArgs checks the JSON arguments Invoke received, in order.
func wantArgs(want ...string) func(t *testing.T, out jstool.Outcome, fk *fake) {
	return func(t *testing.T, out jstool.Outcome, fk *fake) {
		t.Helper()
		calls := fk.seen()
		if len(calls) != len(want) {
			t.Fatalf("%d calls, want %d", len(calls), len(want))
		}
		for i, c := range calls {
			jsonEqual(t, json.RawMessage(c.args), want[i])
		}
	}
}

// runConformance runs every case against mode.
func runConformance(t *testing.T, mode Mode) {
	for _, tc := range conformanceCases {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			fk := newFake()
			if tc.setup != nil {
				tc.setup(fk)
			}
			ex := newTestExecutor(t, newTestFactory(t, mode, tc.lim), fk)
			for i, st := range tc.steps {
				out := run(t, ex, fmt.Sprintf("call-%d", i), st.code)
				checkStep(t, out, st)
				if st.check != nil {
					st.check(t, out, fk)
				}
			}
		})
	}
}

func checkStep(t *testing.T, out jstool.Outcome, st step) {
	t.Helper()
	if st.kind == "" {
		if out.Failure != nil {
			t.Fatalf("failure %+v, want success", *out.Failure)
		}
		if st.want != "" {
			jsonEqual(t, out.Value, st.want)
		}
		return
	}
	if out.Failure == nil {
		t.Fatalf("success %s, want a %s failure", out.Value, st.kind)
	}
	if out.Failure.Kind != st.kind {
		t.Fatalf("failure %+v, want kind %s", *out.Failure, st.kind)
	}
	for _, s := range st.says {
		if !strings.Contains(out.Failure.Message, s) {
			t.Errorf("failure message %q does not say %q", out.Failure.Message, s)
		}
	}
}

func TestConformance(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { runConformance(t, mode) })
	}
}

// TestIsolationBetweenExecutors: pollution and globals in one realm are
// invisible in another of the same factory, and in the next script of the
// same executor.
func TestIsolationBetweenExecutors(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			leakCheck(t)
			f := newTestFactory(t, mode, Limits{})
			a := newTestExecutor(t, f, newFake())
			b := newTestExecutor(t, f, newFake())
			run(t, a, "a", `Object.prototype.polluted = "yes"; globalThis.secret = "a's"; Array.prototype.map = null; return 0`)
			out := run(t, b, "b", `return [({}).polluted, typeof secret, typeof [].map]`)
			jsonEqual(t, out.Value, `[null, "undefined", "function"]`)
			out = run(t, a, "a2", `return [({}).polluted, typeof secret, typeof [].map]`)
			jsonEqual(t, out.Value, `[null, "undefined", "function"]`)
		})
	}
}

// TestCapabilityNames: dotted names nest; bad names are refused.
func TestCapabilityNames(t *testing.T) {
	f := newTestFactory(t, ModeInProcess, Limits{})
	bad := [][]string{{""}, {"a..b"}, {".a"}, {"a."}, {"a", "a"}, {"kv", "kv.get"}, {"kv.get", "kv-x", "kv"}}
	for _, names := range bad {
		var infos []jstool.CapabilityInfo
		for _, n := range names {
			infos = append(infos, jstool.CapabilityInfo{Name: n})
		}
		if _, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: infos, Invoke: newFake().invoke}); err == nil {
			t.Errorf("NewExecutor(%q) succeeded", names)
		}
	}
	fk := newFake()
	infos := []jstool.CapabilityInfo{{Name: "a.b.c"}, {Name: "a.b.d"}, {Name: "__proto__.x"}, {Name: "constructor"}}
	ex, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: infos, Invoke: fk.invoke})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	out := run(t, ex, "c", `for (const f of [caps.a.b.c, caps["__proto__"].x, caps.constructor]) { try { await f({}) } catch (e) {} }
		return Object.keys(caps).sort()`)
	jsonEqual(t, out.Value, `["__proto__", "a", "constructor"]`)
	var got []string
	for _, c := range fk.seen() {
		got = append(got, c.capability)
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "__proto__.x a.b.c constructor" {
		t.Errorf("invoked %v", got)
	}
}
