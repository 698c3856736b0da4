package jsexec

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// workerExecutor is an executor whose realm lives in a worker process. The
// worker starts on the first Execute and again after it died or was killed
// (the globals are lost then, and the failure says so).
type workerExecutor struct {
	s      settings
	caps   []string
	capSet map[string]bool
	invoke jstool.InvokeFunc

	gate   // its mu guards proc and nextID
	proc   *proc
	nextID uint64

	lastPID atomic.Int64 // the latest worker's pid, for tests
}

var _ jstool.Executor = (*workerExecutor)(nil)

func newWorkerExecutor(s settings, caps []string, invoke jstool.InvokeFunc) *workerExecutor {
	set := make(map[string]bool, len(caps))
	for _, c := range caps {
		set[c] = true
	}
	return &workerExecutor{s: s, caps: caps, capSet: set, invoke: invoke}
}

// lostGlobals ends every failure that replaced the worker.
const lostGlobals = "the JavaScript worker was restarted and globals from earlier scripts are lost"

// Execute runs s in the worker, answering its callbacks with Invoke.
func (e *workerExecutor) Execute(ctx context.Context, s jstool.Script) (out jstool.Outcome, err error) {
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
	if len(s.Code) > lim.MaxSourceBytes {
		return limitOutcome(fmt.Sprintf("the script is %d bytes; the limit is %d bytes", len(s.Code), lim.MaxSourceBytes)), nil
	}
	if e.proc != nil {
		select {
		case <-e.proc.exited:
			// It died while idle (killed from outside): the script about
			// to run is not to blame.
			e.s.log.Warn("jsexec: idle worker died", "pid", e.proc.pid, "note", e.proc.deathNote())
			e.proc.kill()
			e.proc = nil
		default:
		}
	}
	if e.proc == nil {
		p, err := startProc(ectx, e.s, e.caps)
		if err != nil {
			if context.Cause(ectx) == ErrClosed {
				return jstool.Outcome{}, ErrClosed
			}
			return jstool.Outcome{}, err
		}
		e.proc = p
		e.lastPID.Store(int64(p.pid))
	}
	p := e.proc
	e.nextID++
	id := e.nextID
	start := time.Now()
	hardline := start.Add(lim.Timeout + e.s.grace)
	if err := p.send(&frame{T: frameExec, ID: id, CallID: s.CallID, Code: []byte(s.Code)}, hardline); err != nil {
		return e.died(ectx, p, nil)
	}

	// Callbacks may not outlive the script: their context ends when Execute
	// returns, or at the hard deadline, past the worker's own timeout.
	ictx, icancel := context.WithDeadline(ectx, hardline)
	defer icancel()
	runDone := make(chan struct{})
	defer close(runDone)
	results := make(chan callResult, lim.MaxPendingCallbacks)
	var (
		attachments []model.Attachment
		pending     = map[int]bool{}
		calls       int
		cancelled   bool
	)
	hard := time.NewTimer(time.Until(hardline))
	defer hard.Stop()
	ctxDone := ectx.Done()
	for {
		select {
		case f, ok := <-p.frames:
			if !ok {
				return e.died(ectx, p, attachments)
			}
			switch {
			case f.T == frameCallback && f.ID == id:
				if cancelled {
					continue // the worker is stopping this script
				}
				calls++
				if f.Seq != calls || calls > lim.MaxCallbacks || len(pending) >= lim.MaxPendingCallbacks || !e.capSet[f.Capability] {
					return e.violation(p, fmt.Sprintf("callback #%d to %q (expected #%d, %d pending)", f.Seq, f.Capability, calls, len(pending)))
				}
				pending[f.Seq] = true
				go func(seq int, capability string, args json.RawMessage) {
					res := invokeSafely(ictx, e.invoke, s.CallID, seq, capability, args, e.s.log)
					select {
					case results <- res:
					case <-runDone:
					}
				}(f.Seq, f.Capability, f.Args)
			case f.T == frameResult && f.ID == id:
				o := f.Outcome.outcome()
				o.Attachments = attachments
				if ectx.Err() != nil {
					// Cancelled before the result arrived: even a script that
					// finished (perhaps because a callback failed with the
					// cancellation) counts as interrupted.
					o.Failure = cancelledOutcome(ectx).Failure
					if f.Reset {
						o.Failure.Message += "; " + resetNote
					}
					return o, e.interrupted(ectx)
				}
				return o, nil
			default:
				return e.violation(p, fmt.Sprintf("unexpected %s frame for script %d", f.T, f.ID))
			}
		case res := <-results:
			delete(pending, res.seq)
			if ectx.Err() != nil {
				// Cancelled (ctxDone tells the worker): a result handed over
				// now would run the script only to be interrupted.
				continue
			}
			reply := &frame{T: frameCBResult, ID: id, Seq: res.seq, Failed: res.failed, Error: res.err}
			if !res.failed {
				if int64(len(res.value)) > lim.MemoryBytes {
					reply.Failed, reply.Error = true, fmt.Sprintf("the result is %d bytes of JSON, more than the realm's memory limit", len(res.value))
				} else {
					reply.Value = res.value
					attachments = append(attachments, res.attachments...)
				}
			}
			if err := p.send(reply, hardline); err != nil {
				return e.died(ectx, p, attachments)
			}
		case <-p.exited:
			return e.died(ectx, p, attachments)
		case <-ctxDone:
			ctxDone = nil
			cancelled = true
			if context.Cause(ectx) == ErrClosed {
				p.kill()
				e.proc = nil
				return jstool.Outcome{Attachments: attachments}, e.interrupted(ectx)
			}
			if err := p.send(&frame{T: frameCancel, ID: id}, time.Now().Add(e.s.grace)); err != nil {
				return e.died(ectx, p, attachments)
			}
			hard.Reset(e.s.grace)
		case <-hard.C:
			p.kill()
			e.proc = nil
			if ectx.Err() != nil {
				o := cancelledOutcome(ectx)
				o.Attachments = attachments
				return o, e.interrupted(ectx)
			}
			return jstool.Outcome{Attachments: attachments, Failure: &jstool.Failure{Kind: "timeout", Message: fmt.Sprintf("the script exceeded its time limit of %s and did not stop, so Cairn killed its JavaScript worker; %s", lim.Timeout, lostGlobals)}}, nil
		}
	}
}

// died handles a worker that exited or broke its pipe mid-script.
func (e *workerExecutor) died(ectx context.Context, p *proc, attachments []model.Attachment) (jstool.Outcome, error) {
	p.dead(e.s.grace)
	e.proc = nil
	if ectx.Err() != nil {
		o := cancelledOutcome(ectx)
		o.Attachments = attachments
		return o, e.interrupted(ectx)
	}
	f := p.deathFailure(e.s.limits.MemoryBytes)
	e.s.log.Warn("jsexec: worker died", "pid", p.pid, "note", f.Message)
	return jstool.Outcome{Attachments: attachments, Failure: f}, nil
}

// violation kills a worker that broke the protocol.
func (e *workerExecutor) violation(p *proc, what string) (jstool.Outcome, error) {
	p.kill()
	e.proc = nil
	return jstool.Outcome{}, fmt.Errorf("%w: protocol violation: %s", ErrWorker, what)
}

// interrupted is the error of a script ctx or Close ended.
func (e *workerExecutor) interrupted(ectx context.Context) error {
	cause := context.Cause(ectx)
	if cause == ErrClosed {
		return ErrClosed
	}
	return fmt.Errorf("jsexec: script interrupted: %w", cause)
}

// Close kills the worker, interrupting a running script, and reaps it. It
// is idempotent and returns nil.
func (e *workerExecutor) Close() (err error) {
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("jsexec: close: internal error: %v", x)
		}
	}()
	e.close(func() {
		if e.proc != nil {
			e.proc.kill()
			e.proc = nil
		}
	})
	return nil
}

// pid is the latest worker's process ID, 0 before the first (tests).
func (e *workerExecutor) pid() int { return int(e.lastPID.Load()) }
