package jsexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// inProcess is an executor whose realm lives in this process.
type inProcess struct {
	s      settings
	caps   []string
	invoke jstool.InvokeFunc

	gate  // its mu guards realm and host
	realm *realm
	host  *realmHost // nil until the first Execute
}

// realmHost is the goroutine that runs a realm's scripts, one at a time.
// It lives as long as its realm, so the stack goja grows is reused from one
// script to the next (a goroutine per script spent most of a trivial
// script's time growing its stack).
type realmHost struct {
	r    *realm
	reqs chan runReq
}

// runReq is one script for a realmHost.
type runReq struct {
	ctx  context.Context
	s    jstool.Script
	io   runIO
	done chan<- runOutput // buffered: the host never blocks on it
}

func startRealmHost(r *realm) *realmHost {
	h := &realmHost{r: r, reqs: make(chan runReq)}
	go h.serve()
	return h
}

func (h *realmHost) serve() {
	for req := range h.reqs {
		req.done <- h.run(req)
	}
}

func (h *realmHost) run(req runReq) (ro runOutput) {
	defer func() {
		if x := recover(); x != nil {
			ro = runOutput{out: jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: fmt.Sprintf("internal error in the JavaScript engine (%v); %s", x, resetNote)}}, broken: true}
		}
	}()
	ro.out, ro.err = h.r.run(req.ctx, req.s, req.io)
	ro.broken = h.r.broken
	return ro
}

// stop ends the host once its current script, if any, returns.
func (h *realmHost) stop() { close(h.reqs) }

// dropRealm discards the realm and its host; the next Execute makes new
// ones.
func (e *inProcess) dropRealm() {
	if e.host != nil {
		e.host.stop()
		e.host = nil
	}
	e.realm = nil
}

var _ jstool.Executor = (*inProcess)(nil)

func newInProcess(s settings, caps []string, invoke jstool.InvokeFunc) (*inProcess, error) {
	r, err := newRealm(caps, s.limits, false)
	if err != nil {
		return nil, err
	}
	return &inProcess{s: s, caps: caps, invoke: invoke, realm: r}, nil
}

// runOutput is what a realm's run hands back to Execute.
type runOutput struct {
	out    jstool.Outcome
	err    error
	broken bool
}

// Execute runs s. The realm runs on a goroutine of its own (its host) so
// that Execute can return even when the script is stuck inside a builtin that Interrupt
// cannot reach (a catastrophic regular expression, a giant sort): after the
// grace period the realm is abandoned to finish on its own, and the next
// script gets a fresh one.
func (e *inProcess) Execute(ctx context.Context, s jstool.Script) (out jstool.Outcome, err error) {
	defer func() {
		if x := recover(); x != nil {
			out, err = jstool.Outcome{}, fmt.Errorf("jsexec: execute: internal error: %v", x)
		}
	}()
	ectx, exit, err := e.enter(ctx)
	if err != nil {
		return jstool.Outcome{}, err
	}
	defer exit()

	if e.realm == nil {
		r, err := newRealm(e.caps, e.s.limits, false)
		if err != nil {
			return jstool.Outcome{}, err
		}
		e.realm = r
	}
	lim := e.s.limits
	// Callbacks may not outlive the script: their context ends when Execute
	// returns. The deadline past the script's own leaves the timeout to the
	// script's watchdog, so that a slow callback reads as a script timeout.
	// Their context and channel are made at the first callback, on the VM
	// goroutine: most scripts call no capability, and a timer and a channel
	// of MaxPendingCallbacks results were a third of a script's allocations.
	deadline := time.Now().Add(lim.Timeout + e.s.grace)
	runDone := make(chan struct{})
	var cb struct {
		sync.Mutex
		ctx     context.Context
		cancel  context.CancelFunc
		results chan callResult
		ended   bool
	}
	var io runIO
	defer func() {
		// Ended first: a callback the script starts from now on starts
		// nothing, and one started has its context ended before its
		// result is refused.
		cb.Lock()
		if cb.cancel != nil {
			cb.cancel()
		}
		cb.ended = true
		cb.Unlock()
		if testHookEnding != nil {
			testHookEnding(io)
		}
		close(runDone)
	}()
	io = runIO{
		dispatch: func(seq int, capability string, args json.RawMessage) error {
			cb.Lock()
			if cb.ended {
				// An abandoned realm's script goes on after Execute
				// returned: its callbacks start nothing.
				cb.Unlock()
				return errors.New("the script's time is over")
			}
			if cb.results == nil {
				cb.ctx, cb.cancel = context.WithDeadline(ectx, deadline)
				cb.results = make(chan callResult, lim.MaxPendingCallbacks)
			}
			ictx, results := cb.ctx, cb.results
			cb.Unlock()
			go func() {
				if ictx.Err() != nil {
					return // the script ended before this call started
				}
				res := invokeSafely(ictx, e.invoke, s.CallID, seq, capability, args, e.s.log)
				select {
				case results <- res:
				case <-runDone:
				}
			}()
			return nil
		},
		results: func() <-chan callResult {
			cb.Lock()
			defer cb.Unlock()
			return cb.results
		},
	}

	if e.host == nil {
		e.host = startRealmHost(e.realm)
	}
	done := make(chan runOutput, 1)
	e.host.reqs <- runReq{ctx: ectx, s: s, io: io, done: done}

	hard := time.NewTimer(lim.Timeout + e.s.grace)
	defer hard.Stop()
	ctxDone := ectx.Done()
	for {
		select {
		case ro := <-done:
			if ro.broken {
				e.dropRealm()
			}
			if ro.err == nil && ectx.Err() != nil {
				// A callback failed because of the cancellation and the
				// script ended before the watchdog saw it: still cancelled.
				ro.out.Failure = cancelledOutcome(ectx).Failure
				if ro.broken {
					ro.out.Failure.Message += "; " + resetNote
				}
				ro.err = fmt.Errorf("jsexec: script interrupted: %w", context.Cause(ectx))
			}
			if ro.err != nil {
				return ro.out, e.cancelled(ectx, ro.err)
			}
			return ro.out, nil
		case <-ctxDone:
			ctxDone = nil
			hard.Reset(e.s.grace)
		case <-hard.C:
			// Stuck in a builtin: abandon the realm to its goroutine.
			e.dropRealm()
			if ectx.Err() != nil {
				return cancelledOutcome(ectx), e.cancelled(ectx, fmt.Errorf("jsexec: script interrupted: %w", context.Cause(ectx)))
			}
			return jstool.Outcome{Failure: &jstool.Failure{Kind: "timeout", Message: fmt.Sprintf("the script exceeded its time limit of %s inside a builtin that cannot be interrupted; the realm was discarded and its globals are lost", lim.Timeout)}}, nil
		}
	}
}

// testHookEnding, set only by tests, runs in Execute's end between its
// two steps with the script's callbacks: what a script that goes on after
// Execute (an abandoned realm's) can do there.
var testHookEnding func(io runIO)

// cancelled maps an interruption by Close to ErrClosed.
func (e *inProcess) cancelled(ectx context.Context, err error) error {
	if context.Cause(ectx) == ErrClosed {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Close releases the realm, interrupting a running script. It is
// idempotent and returns nil.
func (e *inProcess) Close() (err error) {
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("jsexec: close: internal error: %v", x)
		}
	}()
	e.close(e.dropRealm)
	return nil
}

// cancelledOutcome is the outcome of a script ctx ended.
func cancelledOutcome(ctx context.Context) jstool.Outcome {
	return jstool.Outcome{Failure: &jstool.Failure{Kind: "cancelled", Message: "the script was cancelled: " + context.Cause(ctx).Error()}}
}

// invokeSafely calls the invoker, turning a panic into a rejection. The
// panic value goes to the log, not to JavaScript: it bypassed the invoker's
// redaction.
func invokeSafely(ctx context.Context, invoke jstool.InvokeFunc, callID string, seq int, capability string, args json.RawMessage, log *slog.Logger) (res callResult) {
	defer func() {
		if x := recover(); x != nil {
			log.Error("jsexec: capability panicked", "capability", capability, "seq", seq, "script_call_id", callID, "panic", fmt.Sprint(x))
			res = callResult{seq: seq, failed: true, err: fmt.Sprintf("caps.%s: internal error in the host", capability)}
		}
	}()
	v, err := invoke(ctx, callID, seq, capability, args)
	if err != nil {
		return callResult{seq: seq, failed: true, err: err.Error()}
	}
	js := v.JSON
	if len(js) == 0 {
		js = json.RawMessage("null")
	}
	return callResult{seq: seq, value: js, attachments: v.Attachments}
}
