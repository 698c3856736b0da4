package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// Run runs one attempt of a task. It returns:
//   - (Result{Reply}, nil) when the completed checkpoint is committed, or was
//     already (C7); Result.CleanupError may still carry a teardown failure;
//   - (Result{Waiting: true}, err) with errors.Is(err, ErrWaiting) when the
//     run parked on wait_calls;
//   - (nil, err) otherwise: the durable checkpoint is whatever last committed,
//     and a later attempt resumes from it.
//
// Run never panics: a panic in an injected component is recovered and
// returned wrapping ErrPanic.
func Run(ctx context.Context, in Input) (res *Result, err error) {
	c, err := in.validate()
	if err != nil {
		return nil, err
	}
	r := &runner{in: &in, c: c, notice: in.RecoveryNotice, fresh: map[string]bool{}}
	if in.Clock == nil {
		r.now = time.Now
	} else {
		r.now = in.Clock.Now
	}
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, errors.Join(fmt.Errorf("%w: %v", ErrPanic, p), r.cleanup())
		}
	}()
	res, err = r.run(ctx)
	cerr := r.cleanup()
	switch {
	case err == nil:
		if res != nil {
			res.CleanupError = cerr
		}
	case errors.Is(err, ErrWaiting) && res != nil:
		res.CleanupError = cerr
		err = errors.Join(err, cerr)
	default:
		res, err = nil, errors.Join(err, cerr)
	}
	return res, err
}

type runner struct {
	in     *Input
	c      *contract
	now    func() time.Time
	cp     *Checkpoint // the last durable checkpoint
	notice string      // recovery notice, spent by the first request

	// fresh marks calls this attempt put in dispatching: any other
	// dispatching call was interrupted in an earlier attempt.
	fresh map[string]bool

	exec    jstool.Executor
	invoker *jstool.Invoker
	// closeErrs are teardown failures of executors discarded mid-attempt.
	closeErrs []error
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	cp, err := r.in.Store.LoadCheckpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("runtime: load checkpoint: %w", err)
	}
	if cp == nil {
		if strings.TrimSpace(r.in.Message) == "" {
			return nil, inputErr("Message", "a fresh run needs a nonempty message")
		}
		if err := r.start(ctx); err != nil {
			return nil, err
		}
	} else {
		if cp.Version != CheckpointVersion {
			return nil, fmt.Errorf("%w: checkpoint version %d, this runtime reads %d", ErrContractMismatch, cp.Version, CheckpointVersion)
		}
		if cp.Reply != nil {
			return &Result{Reply: cp.Reply}, nil // C7: touch nothing
		}
		if cp.ContractHash != r.c.hash {
			return nil, fmt.Errorf("%w: checkpoint contract %.12s, input contract %.12s", ErrContractMismatch, cp.ContractHash, r.c.hash)
		}
		r.cp = cp
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("runtime: %w", err)
		}
		select {
		case <-r.in.Drain:
			return nil, r.drain(ctx)
		default:
		}
		switch r.cp.Phase {
		case PhaseModel:
			if err := r.modelStep(ctx); err != nil {
				return nil, err
			}
		case PhaseCalls:
			res, err := r.callStep(ctx)
			if res != nil || err != nil {
				return res, err
			}
		default:
			return nil, fmt.Errorf("runtime: checkpoint revision %d has unknown phase %q", r.cp.Revision, r.cp.Phase)
		}
	}
}

// drain stops between commits. A call this attempt put in dispatching (the
// merged postresult + predispatch commit) has not started: one more commit
// puts it back to pending, so the next attempt dispatches it instead of
// reporting an unknown effect.
func (r *runner) drain(ctx context.Context) error {
	for i, c := range r.cp.Calls {
		if c.State.Terminal() {
			continue
		}
		if c.State == CallDispatching && r.fresh[c.ID] && r.cp.Phase == PhaseCalls {
			next := r.cp.clone()
			next.Calls[i].State = CallPending
			if err := r.commit(ctx, next); err != nil {
				return errors.Join(ErrDrained, err)
			}
		}
		break
	}
	return ErrDrained
}

// start commits revision 1 with the user message (C2).
func (r *runner) start(ctx context.Context) error {
	key := ""
	if r.in.IDs != nil {
		key = r.in.IDs.NewID()
	} else {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("runtime: run key: %w", err)
		}
		key = hex.EncodeToString(b[:])
	}
	if key == "" {
		return inputErr("IDs", "NewID returned an empty ID")
	}
	r.cp = &Checkpoint{Version: CheckpointVersion, ContractHash: r.c.hash, RunKey: key, Phase: PhaseModel}
	next := r.cp.clone()
	next.Append = []model.Message{{Role: model.RoleUser, Parts: []model.Part{{Type: model.PartText, Text: r.in.Message}}}}
	return r.commit(ctx, next)
}

// commit saves next as revision cp.Revision+1, assigning IDs to the messages
// it appends. On success it becomes the durable checkpoint.
func (r *runner) commit(ctx context.Context, next *Checkpoint) error {
	next.Revision = r.cp.Revision + 1
	for i := range next.Append {
		if next.Append[i].ID == "" {
			next.Append[i].ID = messageID(next.RunKey, next.Revision, i)
		}
	}
	if err := r.in.Store.SaveCheckpoint(ctx, next); err != nil {
		return fmt.Errorf("runtime: save checkpoint revision %d: %w", next.Revision, err)
	}
	r.cp = next
	return nil
}

func messageID(key string, rev int64, i int) string {
	return fmt.Sprintf("%s-%d-%d", key, rev, i)
}

func (r *runner) emit(ctx context.Context, ev SinkEvent) {
	ev.Text = r.in.Redactor.Redact(ev.Text)
	ev.Tool = r.in.Redactor.Redact(ev.Tool) // a tool call's name is the model's
	r.in.Sink.Emit(ctx, ev)
}

// cleanup closes the executor if this attempt allocated one (C41).
func (r *runner) cleanup() error {
	r.discardExecutor()
	err := errors.Join(r.closeErrs...)
	r.closeErrs = nil
	return err
}

// discardExecutor closes the executor; the next run_js allocates another.
func (r *runner) discardExecutor() {
	if r.exec == nil {
		return
	}
	e := r.exec
	r.exec = nil
	defer func() {
		if p := recover(); p != nil {
			r.closeErrs = append(r.closeErrs, fmt.Errorf("runtime: close executor: %w: %v", ErrPanic, p))
		}
	}()
	if err := e.Close(); err != nil {
		r.closeErrs = append(r.closeErrs, fmt.Errorf("runtime: close executor: %w", err))
	}
}
