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

// workerExecutor is an executor whose scripts run in the factory's worker
// processes. It holds no worker of its own: each Execute leases one from
// the pool for its script and hands it back at the end (see pool).
type workerExecutor struct {
	s      settings
	pool   *pool
	caps   []string
	capSet map[string]bool
	invoke jstool.InvokeFunc

	gate // serializes Execute and Close

	lastPID atomic.Int64 // the pid of the worker of the latest script, for tests
}

var _ jstool.Executor = (*workerExecutor)(nil)

func newWorkerExecutor(s settings, pl *pool, caps []string, invoke jstool.InvokeFunc) *workerExecutor {
	set := make(map[string]bool, len(caps))
	for _, c := range caps {
		set[c] = true
	}
	pl.opened()
	return &workerExecutor{s: s, pool: pl, caps: caps, capSet: set, invoke: invoke}
}

// Execute runs s in a fresh realm in a worker leased for it, answering its
// callbacks with Invoke.
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
	p, err := e.pool.acquire(ectx)
	if err != nil {
		if ectx.Err() != nil {
			return cancelledOutcome(ectx), e.interrupted(ectx)
		}
		return jstool.Outcome{}, err
	}
	e.lastPID.Store(int64(p.pid))
	keep := false // set once the worker has answered with the script's result
	defer func() { e.pool.release(p, keep) }()
	p.nextID++
	p.scripts++
	id := p.nextID
	start := time.Now()
	hardline := start.Add(lim.Timeout + e.s.grace)
	if err := p.send(&frame{T: frameExec, ID: id, CallID: s.CallID, Code: []byte(s.Code), Caps: e.caps}, hardline); err != nil {
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
				keep = !f.Retire
				o := f.Outcome.outcome()
				o.Attachments = attachments
				if ectx.Err() != nil {
					// Cancelled before the result arrived: even a script that
					// finished (perhaps because a callback failed with the
					// cancellation) counts as interrupted.
					o.Failure = cancelledOutcome(ectx).Failure
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
				return jstool.Outcome{Attachments: attachments}, e.interrupted(ectx)
			}
			if err := p.send(&frame{T: frameCancel, ID: id}, time.Now().Add(e.s.grace)); err != nil {
				return e.died(ectx, p, attachments)
			}
			hard.Reset(e.s.grace)
		case <-hard.C:
			p.kill()
			if ectx.Err() != nil {
				o := cancelledOutcome(ectx)
				o.Attachments = attachments
				return o, e.interrupted(ectx)
			}
			return jstool.Outcome{Attachments: attachments, Failure: &jstool.Failure{Kind: "timeout", Message: fmt.Sprintf("the script exceeded its time limit of %s and did not stop, so Cairn killed its JavaScript worker", lim.Timeout)}}, nil
		}
	}
}

// died handles a worker that exited or broke its pipe mid-script.
func (e *workerExecutor) died(ectx context.Context, p *proc, attachments []model.Attachment) (jstool.Outcome, error) {
	p.dead(e.s.grace)
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

// Close interrupts a running script (its worker is killed and reaped) and
// lets the pool stop its idle workers if no other executor is open. It is
// idempotent and returns nil.
func (e *workerExecutor) Close() (err error) {
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("jsexec: close: internal error: %v", x)
		}
	}()
	e.close(e.pool.closed)
	return nil
}

// pid is the process ID of the worker of the latest script, 0 before the
// first (tests).
func (e *workerExecutor) pid() int { return int(e.lastPID.Load()) }
