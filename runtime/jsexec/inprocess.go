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

// inProcess is an executor whose realms live in this process, a fresh one
// for each script.
type inProcess struct {
	s      settings
	caps   []string
	invoke jstool.InvokeFunc

	gate            // its mu guards host
	host *realmHost // nil until the first Execute, and after one abandoned
}

// realmHost is the goroutine that runs an executor's scripts, one at a
// time, each in a realm it builds for it. It lives as long as the
// executor (unless a script stuck in a builtin is abandoned to it), so the
// stack goja grows is reused from one script to the next (a goroutine per
// script spent most of a trivial script's time growing its stack).
type realmHost struct {
	caps []string
	lim  Limits
	reqs chan runReq
}

// runReq is one script for a realmHost.
type runReq struct {
	ctx  context.Context
	s    jstool.Script
	io   runIO
	done chan<- runOutput // buffered: the host never blocks on it
}

func startRealmHost(caps []string, lim Limits) *realmHost {
	h := &realmHost{caps: caps, lim: lim, reqs: make(chan runReq)}
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
			ro = runOutput{out: jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: fmt.Sprintf("internal error in the JavaScript engine (%v)", x)}}, broken: true}
		}
	}()
	// Built on demand: a realm built ahead (as workers do) would be one
	// too many for the attempt's last script, and an attempt runs few.
	r, err := newRealm(h.caps, h.lim, false)
	if err != nil {
		return runOutput{err: err, failed: true}
	}
	ro.out, ro.err = r.run(req.ctx, req.s, req.io)
	ro.broken = r.broken
	return ro
}

// stop ends the host once its current script, if any, returns.
func (h *realmHost) stop() { close(h.reqs) }

// dropHost discards the host; the next Execute starts another.
func (e *inProcess) dropHost() {
	if e.host != nil {
		e.host.stop()
		e.host = nil
	}
}

var _ jstool.Executor = (*inProcess)(nil)

func newInProcess(s settings, caps []string, invoke jstool.InvokeFunc) *inProcess {
	return &inProcess{s: s, caps: caps, invoke: invoke}
}

// runOutput is what a realm's run hands back to Execute.
type runOutput struct {
	out    jstool.Outcome
	err    error
	broken bool
	// failed says err is the host's: the realm could not be built.
	failed bool
}

// Execute runs s in a fresh realm. The realm runs on a goroutine of its own
// (its host) so that Execute can return even when the script is stuck
// inside a builtin that Interrupt cannot reach (a catastrophic regular
// expression, a giant sort): after the grace period the host and its realm
// are abandoned to finish on their own, and the next script gets a new host.
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
		e.host = startRealmHost(e.caps, lim)
	}
	done := make(chan runOutput, 1)
	e.host.reqs <- runReq{ctx: ectx, s: s, io: io, done: done}

	hard := time.NewTimer(lim.Timeout + e.s.grace)
	defer hard.Stop()
	ctxDone := ectx.Done()
	for {
		select {
		case ro := <-done:
			if ro.failed {
				return jstool.Outcome{}, ro.err
			}
			if ro.err == nil && ectx.Err() != nil {
				// A callback failed because of the cancellation and the
				// script ended before the watchdog saw it: still cancelled.
				ro.out.Failure = cancelledOutcome(ectx).Failure
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
			e.dropHost()
			if ectx.Err() != nil {
				return cancelledOutcome(ectx), e.cancelled(ectx, fmt.Errorf("jsexec: script interrupted: %w", context.Cause(ectx)))
			}
			return jstool.Outcome{Failure: &jstool.Failure{Kind: "timeout", Message: fmt.Sprintf("the script exceeded its time limit of %s inside a builtin that cannot be interrupted; its realm was abandoned", lim.Timeout)}}, nil
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

// Close stops the realm host, interrupting a running script. It is
// idempotent and returns nil.
func (e *inProcess) Close() (err error) {
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("jsexec: close: internal error: %v", x)
		}
	}()
	e.close(e.dropHost)
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
