package jsexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dop251/goja"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// scriptName is the source name in stack traces. The script's first line is
// line 1; its columns on that line are shifted by len(wrapPrefix).
const scriptName = "run_js"

const (
	wrapPrefix = "(async function () {"
	wrapSuffix = "\n})"
)

// maxMessageBytes bounds a failure message built from a thrown value.
const maxMessageBytes = 8 << 10

// helperSource runs once per realm before any script, so the builtins it
// captures are the originals whatever a script later does to the globals.
// describe renders any value as text for console lines and failure
// messages; its catch never swallows an interrupt (goja's are uncatchable).
const helperSource = `(function () {
	"use strict";
	var stringify = JSON.stringify, toStr = String;
	return {
		stringify: stringify,
		parse: JSON.parse,
		freeze: Object.freeze,
		Error: Error,
		hasOwn: Object.prototype.hasOwnProperty,
		isArray: Array.isArray,
		dateTime: Date.prototype.getTime,
		dateISO: Date.prototype.toISOString,
		numberValue: Number.prototype.valueOf,
		stringValue: String.prototype.valueOf,
		booleanValue: Boolean.prototype.valueOf,
		checkpoint: function () {},
		describe: function (v) {
			try {
				switch (typeof v) {
				case "string": return v;
				case "function": return "[Function]";
				case "bigint": return toStr(v) + "n";
				case "object":
					if (v === null) return "null";
					var st = v.stack;
					if (typeof st === "string" && st !== "") return st;
					var s = stringify(v);
					if (typeof s === "string") return s;
					return toStr(v);
				default: return toStr(v);
				}
			} catch (e) {
				return "[unprintable " + typeof v + "]";
			}
		}
	};
})()`

// callResult is one capability callback's outcome on its way back to the VM.
type callResult struct {
	seq         int
	value       json.RawMessage
	attachments []model.Attachment
	failed      bool
	err         string
}

// runIO connects one script to whoever performs its callbacks: a goroutine
// per call in process, the parent process in a worker.
type runIO struct {
	// dispatch starts callback seq. It is called on the VM goroutine and
	// must not block long; its error rejects the call's promise.
	dispatch func(seq int, capability string, args json.RawMessage) error
	// results brings callback results back. Its capacity is at least
	// MaxPendingCallbacks, so a sender of a valid result never blocks. It
	// is called on the VM goroutine, only after a dispatch: a script that
	// calls no capability (most) costs its executor no channel.
	results func() <-chan callResult
}

// fixed is a results func for a channel made up front.
func fixed(ch chan callResult) func() <-chan callResult {
	return func() <-chan callResult { return ch }
}

// realm is one goja runtime with its bindings. It is not goroutine-safe:
// one script at a time, and every method runs on the goroutine running the
// script ("the VM goroutine"); only the watchdog calls vm.Interrupt from
// elsewhere.
type realm struct {
	vm  *goja.Runtime
	lim Limits
	// absoluteHeap says MemoryBytes bounds the whole heap (a worker owns its
	// process) rather than its growth during a script (in process).
	absoluteHeap bool

	stringify goja.Callable
	parse     goja.Callable
	describeF goja.Callable
	freeze    goja.Callable
	errorCtor goja.Constructor

	// The original builtins hostJSON uses, and its own entry point.
	hasOwn, isArray, dateTime, dateISO     goja.Callable
	numberValue, stringValue, booleanValue goja.Callable
	checkpoint, walkF                      goja.Callable
	toJSONKey                              goja.Value
	walks                                  []*jsonWalk

	cur *scriptRun
	// broken is set when the script tripped a limit or timed out, was
	// interrupted while running JavaScript, or let a Go panic escape goja
	// (the VM's state is unknown). An interrupted script can leave goja's
	// VM broken (part of its call stack stays behind, after which no
	// promise job runs again, and every value the script held stays
	// reachable). No realm runs a second script anyway; a worker whose
	// realm broke is not given another script, so that nothing such a
	// script left in the process (a heap grown to the limit) meets the
	// script of another run.
	broken bool
}

// rejection is a promise rejected with no handler (yet).
type rejection struct {
	reason goja.Value
	order  int
}

// pendingCall holds the resolving functions of one callback's promise.
type pendingCall struct {
	resolve, reject func(any) error
}

// scriptRun is the state of the script running in a realm.
type scriptRun struct {
	io         runIO
	w          *watchdog
	seq        int
	pending    map[int]pendingCall
	rejections map[*goja.Promise]rejection
	rejected   int // rejections tracked so far, to order them

	logs         []jstool.LogLine
	logBytes     int
	dropped      int
	consoleBytes int
	attachments  []model.Attachment
}

// newRealm builds a realm binding caps (validated, sorted names).
func newRealm(caps []string, lim Limits, absoluteHeap bool) (*realm, error) {
	r, err := newBareRealm(lim, absoluteHeap)
	if err != nil {
		return nil, err
	}
	if err := r.bindCaps(caps); err != nil {
		return nil, err
	}
	return r, nil
}

// spare builds realms ahead of the scripts that take them, one at a time
// on a goroutine of its own: building a realm (goja's builtins, the
// helpers) costs ~60 us, which then overlaps the script before, or the
// wait for the next.
type spare struct {
	lim          Limits
	absoluteHeap bool
	built        chan builtRealm // capacity 1: the build never blocks
}

type builtRealm struct {
	r   *realm
	err error
}

// newSpare starts building the first realm.
func newSpare(lim Limits, absoluteHeap bool) *spare {
	s := &spare{lim: lim, absoluteHeap: absoluteHeap, built: make(chan builtRealm, 1)}
	s.build()
	return s
}

func (s *spare) build() {
	go func() {
		r, err := newBareRealm(s.lim, s.absoluteHeap)
		s.built <- builtRealm{r, err}
	}()
}

// take returns the realm built ahead, waiting for its build to end, with
// caps bound, and starts building the next.
func (s *spare) take(caps []string) (*realm, error) {
	b := <-s.built
	s.build()
	if b.err != nil {
		return nil, b.err
	}
	if err := b.r.bindCaps(caps); err != nil {
		return nil, err
	}
	return b.r, nil
}

// warmProgram runs in every realm as it is built, so that what every
// script uses (an async function and its promise) is made then, not on
// the script's time.
var warmProgram = goja.MustCompile("warm", "(async function () {})()", false)

// newBareRealm builds a realm with its helpers and console but no caps: a
// worker builds the next script's realm while it waits for that script,
// and binds the script's capabilities when it comes.
func newBareRealm(lim Limits, absoluteHeap bool) (*realm, error) {
	vm := goja.New()
	vm.SetMaxCallStackSize(lim.MaxCallStackSize)
	r := &realm{vm: vm, lim: lim, absoluteHeap: absoluteHeap}

	hv, err := vm.RunProgram(helperProgram)
	if err != nil {
		return nil, fmt.Errorf("jsexec: realm helpers: %w", err)
	}
	h := hv.ToObject(vm)
	fn := func(name string) (goja.Callable, error) {
		f, ok := goja.AssertFunction(h.Get(name))
		if !ok {
			return nil, fmt.Errorf("jsexec: realm helper %s is not a function", name)
		}
		return f, nil
	}
	if r.stringify, err = fn("stringify"); err != nil {
		return nil, err
	}
	if r.parse, err = fn("parse"); err != nil {
		return nil, err
	}
	if r.describeF, err = fn("describe"); err != nil {
		return nil, err
	}
	if r.freeze, err = fn("freeze"); err != nil {
		return nil, err
	}
	for name, dst := range map[string]*goja.Callable{
		"hasOwn": &r.hasOwn, "isArray": &r.isArray, "dateTime": &r.dateTime, "dateISO": &r.dateISO,
		"numberValue": &r.numberValue, "stringValue": &r.stringValue, "booleanValue": &r.booleanValue,
		"checkpoint": &r.checkpoint,
	} {
		if *dst, err = fn(name); err != nil {
			return nil, err
		}
	}
	walkF, ok := goja.AssertFunction(vm.ToValue(r.walkNative))
	if !ok {
		return nil, errors.New("jsexec: realm JSON walker is not a function")
	}
	r.walkF = walkF
	r.toJSONKey = vm.ToValue("toJSON")
	ctor, ok := goja.AssertConstructor(h.Get("Error"))
	if !ok {
		return nil, errors.New("jsexec: realm helper Error is not a constructor")
	}
	r.errorCtor = ctor

	console := vm.NewObject()
	for _, level := range []string{"log", "info", "warn", "error"} {
		if err := console.Set(level, r.consoleFunc(level)); err != nil {
			return nil, fmt.Errorf("jsexec: bind console.%s: %w", level, err)
		}
	}
	if err := vm.Set("console", console); err != nil {
		return nil, fmt.Errorf("jsexec: bind console: %w", err)
	}
	if _, err := vm.RunProgram(warmProgram); err != nil {
		return nil, fmt.Errorf("jsexec: warm the realm: %w", err)
	}
	vm.SetPromiseRejectionTracker(r.trackRejection)
	return r, nil
}

// bindCaps defines the frozen caps tree: null-prototype namespaces, so that
// polluting Object.prototype shows nothing through caps, and non-writable,
// non-configurable properties all the way down.
func (r *realm) bindCaps(caps []string) error {
	vm := r.vm
	root := vm.CreateObject(nil)
	objs := []*goja.Object{root}
	for _, name := range caps {
		segs := strings.Split(name, ".")
		obj := root
		for _, seg := range segs[:len(segs)-1] {
			if v := obj.Get(seg); v != nil {
				child, ok := v.(*goja.Object)
				if !ok {
					return fmt.Errorf("jsexec: capability %q: %q is not a namespace", name, seg)
				}
				obj = child
				continue
			}
			child := vm.CreateObject(nil)
			if err := obj.DefineDataProperty(seg, child, goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_TRUE); err != nil {
				return fmt.Errorf("jsexec: bind capability %q: %w", name, err)
			}
			objs = append(objs, child)
			obj = child
		}
		f := vm.ToValue(r.capFunc(name)).(*goja.Object)
		if err := f.DefineDataProperty("name", vm.ToValue("caps."+name), goja.FLAG_FALSE, goja.FLAG_TRUE, goja.FLAG_FALSE); err != nil {
			return fmt.Errorf("jsexec: bind capability %q: %w", name, err)
		}
		if err := obj.DefineDataProperty(segs[len(segs)-1], f, goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_TRUE); err != nil {
			return fmt.Errorf("jsexec: bind capability %q: %w", name, err)
		}
		objs = append(objs, f)
	}
	for _, o := range objs {
		if _, err := r.freeze(goja.Undefined(), o); err != nil {
			return fmt.Errorf("jsexec: freeze caps: %w", err)
		}
	}
	if err := vm.GlobalObject().DefineDataProperty("caps", root, goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_FALSE); err != nil {
		return fmt.Errorf("jsexec: bind caps: %w", err)
	}
	return nil
}

// run executes one script to completion: its promise settled and no
// callback pending, or a failure. The error is non-nil only when ctx ended
// the script (it wraps ctx's cause); the Outcome then carries a
// "cancelled" failure and what the script logged.
func (r *realm) run(ctx context.Context, s jstool.Script, io runIO) (out jstool.Outcome, err error) {
	if len(s.Code) > r.lim.MaxSourceBytes {
		return limitOutcome(fmt.Sprintf("the script is %d bytes; the limit is %d bytes", len(s.Code), r.lim.MaxSourceBytes)), nil
	}
	if ctx.Err() != nil {
		return cancelledOutcome(ctx), fmt.Errorf("jsexec: script interrupted: %w", context.Cause(ctx))
	}
	sr := &scriptRun{
		io:         io,
		pending:    map[int]pendingCall{},
		rejections: map[*goja.Promise]rejection{},
	}
	sr.w = startWatchdog(ctx, r.vm, r.lim, r.absoluteHeap)
	r.cur = sr
	defer func() {
		if x := recover(); x != nil {
			r.broken = true
			out = sr.outcome(&jstool.Failure{Kind: "exception", Message: fmt.Sprintf("internal error in the JavaScript engine (%v)", x)})
			err = nil
		}
		sr.w.stop()
		r.vm.ClearInterrupt()
		r.cur = nil
	}()

	prg, cerr := programs.compile(s.Code)
	if cerr != nil {
		return sr.outcome(&jstool.Failure{Kind: "exception", Message: truncate(fixPositions(cerr.Error()), maxMessageBytes)}), nil
	}
	fv, rerr := r.vm.RunProgram(prg)
	if rerr != nil {
		return r.fail(ctx, sr, rerr)
	}
	fn, ok := goja.AssertFunction(fv)
	if !ok {
		return sr.outcome(&jstool.Failure{Kind: "exception", Message: "the script is not the body of a function"}), nil
	}
	pv, cerr := fn(goja.Undefined())
	if cerr != nil {
		return r.fail(ctx, sr, cerr)
	}
	var main *goja.Promise
	if o, ok := pv.(*goja.Object); ok {
		main, _ = o.Export().(*goja.Promise)
	}

	for {
		if st := sr.w.reason(); st != nil {
			return r.stopped(ctx, sr, st)
		}
		settled := main == nil || main.State() != goja.PromiseStatePending
		if settled && len(sr.pending) == 0 {
			break
		}
		if len(sr.pending) == 0 {
			// Jobs drain inside every VM entry and there are no timers:
			// with no callback in flight nothing can settle the promise.
			return sr.outcome(&jstool.Failure{Kind: "exception", Message: "the script awaits a promise that can never settle (no capability call is pending)"}), nil
		}
		select {
		case res := <-io.results():
			if ctx.Err() != nil {
				// Cancelled: a result now (most likely the callback's own
				// cancellation) would run the script only for the watchdog
				// to interrupt it mid-JavaScript, which costs the realm.
				sr.w.fire(stop{kind: "cancelled", msg: "the script was cancelled: " + context.Cause(ctx).Error()})
				return r.stopped(ctx, sr, sr.w.reason())
			}
			if e := r.deliver(sr, res); e != nil {
				return r.fail(ctx, sr, e)
			}
		case <-sr.w.fired:
		}
	}

	if main != nil {
		delete(sr.rejections, main)
		if main.State() == goja.PromiseStateRejected {
			msg, e := r.describe(main.Result())
			if e != nil {
				return r.fail(ctx, sr, e)
			}
			return sr.outcome(&jstool.Failure{Kind: "exception", Message: "Uncaught " + msg}), nil
		}
		pv = main.Result()
	}
	if len(sr.rejections) > 0 {
		var first *goja.Promise
		for p, rj := range sr.rejections {
			if first == nil || rj.order < sr.rejections[first].order {
				first = p
			}
		}
		msg, e := r.describe(sr.rejections[first].reason)
		if e != nil {
			return r.fail(ctx, sr, e)
		}
		if n := len(sr.rejections) - 1; n > 0 {
			msg += fmt.Sprintf(" (and %d more)", n)
		}
		return sr.outcome(&jstool.Failure{Kind: "exception", Message: "unhandled promise rejection: " + msg}), nil
	}
	text, defined, tooBig, e := r.hostJSON(pv, r.lim.MaxResultBytes)
	if e != nil {
		var ex *goja.Exception
		if errors.As(e, &ex) {
			msg, e2 := r.describe(ex.Value())
			if e2 != nil {
				return r.fail(ctx, sr, e2)
			}
			return sr.outcome(&jstool.Failure{Kind: "exception", Message: "the returned value cannot be serialized as JSON: " + msg}), nil
		}
		return r.fail(ctx, sr, e)
	}
	out = sr.outcome(nil)
	if tooBig {
		out.Failure = &jstool.Failure{Kind: "limit", Message: fmt.Sprintf("the returned value is more than %d bytes of JSON; the limit is %d bytes", r.lim.MaxResultBytes, r.lim.MaxResultBytes)}
		return out, nil
	}
	if !defined {
		out.Value = json.RawMessage("null")
		return out, nil
	}
	if !json.Valid(text) {
		out.Failure = &jstool.Failure{Kind: "exception", Message: "the returned value did not serialize to valid JSON"}
		return out, nil
	}
	out.Value = json.RawMessage(text)
	return out, nil
}

// deliver settles one callback's promise; goja runs the continuations it
// enables before returning. Its error is uncatchable (an interrupt or a
// stack overflow).
func (r *realm) deliver(sr *scriptRun, res callResult) error {
	pc, ok := sr.pending[res.seq]
	if !ok {
		return nil
	}
	delete(sr.pending, res.seq)
	if res.failed {
		return pc.reject(r.newError(res.err))
	}
	v, err := r.parse(goja.Undefined(), r.vm.ToValue(string(res.value)))
	if err != nil {
		var ex *goja.Exception
		if !errors.As(err, &ex) {
			return err
		}
		return pc.reject(r.newError(fmt.Sprintf("the result is not valid JSON: %s", truncate(ex.Error(), 200))))
	}
	sr.attachments = append(sr.attachments, res.attachments...)
	return pc.resolve(v)
}

// newError builds an Error with the original constructor.
func (r *realm) newError(msg string) goja.Value {
	o, err := r.errorCtor(nil, r.vm.ToValue(msg))
	if err != nil {
		return r.vm.ToValue(msg)
	}
	return o
}

// describe renders v as text under the watchdog. Its error is uncatchable.
func (r *realm) describe(v goja.Value) (string, error) {
	if v == nil {
		v = goja.Undefined()
	}
	s, err := r.describeF(goja.Undefined(), v)
	if err != nil {
		return "", err
	}
	return truncate(fixPositions(strings.TrimSpace(s.String())), maxMessageBytes), nil
}

// firstLinePos matches a position on the script's first line in a stack
// trace ("run_js:1:27") or a syntax error ("Line 1:33").
var firstLinePos = regexp.MustCompile(`(run_js:1:|Line 1:)(\d+)`)

// fixPositions removes the wrapper's width from columns on line 1, so that
// positions point into the code as the model wrote it.
func fixPositions(s string) string {
	return firstLinePos.ReplaceAllStringFunc(s, func(m string) string {
		sub := firstLinePos.FindStringSubmatch(m)
		col, err := strconv.Atoi(sub[2])
		if err != nil || col <= len(wrapPrefix) {
			return m
		}
		return sub[1] + strconv.Itoa(col-len(wrapPrefix))
	})
}

// fail turns an error out of the VM into the outcome. An error other than
// a JavaScript exception unwound the VM mid-script: the realm is replaced.
func (r *realm) fail(ctx context.Context, sr *scriptRun, err error) (jstool.Outcome, error) {
	var (
		intr *goja.InterruptedError
		so   *goja.StackOverflowError
		ex   *goja.Exception
	)
	if !errors.As(err, &ex) {
		r.broken = true
	}
	switch {
	case errors.As(err, &intr):
		if st := sr.w.reason(); st != nil {
			return r.stopped(ctx, sr, st)
		}
		return sr.outcome(&jstool.Failure{Kind: "exception", Message: "the script was interrupted"}), nil
	case errors.As(err, &so):
		return sr.outcome(&jstool.Failure{Kind: "limit", Message: fmt.Sprintf("the call stack exceeded %d frames", r.lim.MaxCallStackSize)}), nil
	case errors.As(err, &ex):
		msg, e := r.describe(ex.Value())
		if e != nil {
			return r.fail(ctx, sr, e)
		}
		return sr.outcome(&jstool.Failure{Kind: "exception", Message: "Uncaught " + msg}), nil
	default:
		return sr.outcome(&jstool.Failure{Kind: "exception", Message: truncate(err.Error(), maxMessageBytes)}), nil
	}
}

// stopped is the outcome of a script the watchdog or a limit stopped. A
// limit or a timeout marks the realm broken even when the script was
// stopped while waiting for callbacks (nothing of the VM to repair then,
// but one rule is simpler to state, and a worker whose heap reached the
// limit is replaced); a cancellation does so only when it unwound the VM
// (fail).
func (r *realm) stopped(ctx context.Context, sr *scriptRun, st *stop) (jstool.Outcome, error) {
	if st.kind != "cancelled" {
		r.broken = true
	}
	out := sr.outcome(&jstool.Failure{Kind: st.kind, Message: st.msg})
	if st.kind == "cancelled" {
		return out, fmt.Errorf("jsexec: script interrupted: %w", context.Cause(ctx))
	}
	return out, nil
}

// outcome collects what the script produced so far.
func (sr *scriptRun) outcome(f *jstool.Failure) jstool.Outcome {
	return jstool.Outcome{Logs: sr.logs, LogsDropped: sr.dropped, Attachments: sr.attachments, Failure: f}
}

// trackRejection records promises rejected with no handler.
func (r *realm) trackRejection(p *goja.Promise, op goja.PromiseRejectionOperation) {
	sr := r.cur
	if sr == nil {
		return
	}
	switch op {
	case goja.PromiseRejectionReject:
		sr.rejected++
		sr.rejections[p] = rejection{reason: p.Result(), order: sr.rejected}
	case goja.PromiseRejectionHandle:
		delete(sr.rejections, p)
	}
}

// capFunc is the binding of one capability: an async function of one
// argument.
func (r *realm) capFunc(name string) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		sr := r.cur
		if sr == nil {
			panic(r.vm.NewTypeError("caps.%s called outside a script", name))
		}
		if sr.seq >= r.lim.MaxCallbacks {
			sr.w.fire(stop{kind: "limit", msg: fmt.Sprintf("the script made more than %d capability calls", r.lim.MaxCallbacks)})
			return goja.Undefined()
		}
		if len(sr.pending) >= r.lim.MaxPendingCallbacks {
			sr.w.fire(stop{kind: "limit", msg: fmt.Sprintf("the script had more than %d capability calls pending at once", r.lim.MaxPendingCallbacks)})
			return goja.Undefined()
		}
		p, resolve, reject := r.vm.NewPromise()
		args, bad, err := r.encodeArg(name, call.Argument(0))
		if err != nil {
			panic(err) // uncatchable: let it unwind the script
		}
		if bad != nil {
			if err := reject(bad); err != nil {
				panic(err)
			}
			return r.vm.ToValue(p)
		}
		sr.seq++
		seq := sr.seq
		sr.pending[seq] = pendingCall{resolve: resolve, reject: reject}
		if derr := sr.io.dispatch(seq, name, args); derr != nil {
			delete(sr.pending, seq)
			if err := reject(r.newError(fmt.Sprintf("caps.%s: %v", name, derr))); err != nil {
				panic(err)
			}
		}
		return r.vm.ToValue(p)
	}
}

// encodeArg serializes a callback argument with hostJSON, so that no
// prototype the realm's scripts polluted changes what the host receives.
// bad is the rejection reason of an argument that cannot be sent; err is
// uncatchable.
func (r *realm) encodeArg(name string, arg goja.Value) (args json.RawMessage, bad goja.Value, err error) {
	if goja.IsUndefined(arg) {
		return json.RawMessage("{}"), nil, nil
	}
	text, defined, tooBig, err := r.hostJSON(arg, r.lim.MaxResultBytes)
	if err != nil {
		var ex *goja.Exception
		if !errors.As(err, &ex) {
			return nil, nil, err
		}
		return nil, ex.Value(), nil
	}
	if tooBig {
		return nil, r.newError(fmt.Sprintf("caps.%s: the argument is more than %d bytes of JSON; the limit is %d bytes", name, r.lim.MaxResultBytes, r.lim.MaxResultBytes)), nil
	}
	if !defined {
		return nil, r.newError(fmt.Sprintf("caps.%s: the argument cannot be serialized as JSON", name)), nil
	}
	return json.RawMessage(text), nil, nil
}

// consoleFunc is console[level].
func (r *realm) consoleFunc(level string) func(goja.FunctionCall) goja.Value {
	return func(call goja.FunctionCall) goja.Value {
		sr := r.cur
		if sr == nil {
			return goja.Undefined()
		}
		var b strings.Builder
		room := r.lim.MaxLogBytes + 1
		for i, a := range call.Arguments {
			s, err := r.describeF(goja.Undefined(), a)
			if err != nil {
				panic(err) // only uncatchable errors escape describe
			}
			piece := s.String()
			sr.consoleBytes += len(piece) + 1
			if sr.consoleBytes > r.lim.MaxConsoleBytes {
				sr.w.fire(stop{kind: "limit", msg: fmt.Sprintf("the script wrote more than %d bytes to the console", r.lim.MaxConsoleBytes)})
				return goja.Undefined()
			}
			if b.Len() < room {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(truncate(piece, room-b.Len()))
			}
		}
		sr.addLog(level, b.String(), r.lim)
		return goja.Undefined()
	}
}

// addLog keeps a console line within the count and byte bounds.
func (sr *scriptRun) addLog(level, text string, lim Limits) {
	if len(sr.logs) >= lim.MaxLogLines || sr.logBytes >= lim.MaxLogBytes {
		sr.dropped++
		return
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if room := lim.MaxLogBytes - sr.logBytes; len(text) > room {
		cut := truncate(text, room)
		text = fmt.Sprintf("%s... [%d bytes truncated]", cut, len(text)-len(cut))
		sr.logBytes = lim.MaxLogBytes
	} else {
		sr.logBytes += len(text)
	}
	sr.logs = append(sr.logs, jstool.LogLine{Level: level, Text: text})
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// limitOutcome is a script refused before it ran.
func limitOutcome(msg string) jstool.Outcome {
	return jstool.Outcome{Failure: &jstool.Failure{Kind: "limit", Message: msg}}
}
