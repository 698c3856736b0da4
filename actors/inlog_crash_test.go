package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/store/storetest"
)

// C24, C34, C35 under the run loop's crash matrix, with the budget kept in
// the log: every store operation of each scenario with no children fails
// in turn, before its commit and after it with the acknowledgement lost,
// and the run recovers attempt after attempt, each with the node's budget
// (inLog: its commits charge it, its side entry in the budgets bucket
// what they do not; each attempt's end settles it, as Node.attempt does).
// Besides the matrix's own checks, each case's totals (the last commit's
// and the side entry's) must count a durable step for every model
// request made, never more steps than the budget has, and every
// response's tokens exactly once (every response reports 15).
func TestCrashMatrixBudgetInTheLog(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	s, err := cjs.New(ctx, nc, cjs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateOrUpdateKeyValue(ctx, bucketConfig("cairn_budgets", 1)); err != nil {
		t.Fatal(err)
	}
	w, err := cjs.NewLog(ctx, nc, cjs.LogConfig{Stream: "KV_cairn_budgets"})
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{w: newKVBucket(w, "cairn_budgets"), now: time.Now}
	var n atomic.Int64
	newOpener := func(*testing.T) storetest.Opener {
		prefix := fmt.Sprintf("t%d-", n.Add(1))
		return &logOpener{s: s, l: l, prefix: prefix, rec: &events.Run{RunID: prefix + "root", RootRunID: prefix + "root"}}
	}
	var scenarios []runtimetest.Scenario
	for _, sc := range runtimetest.Scenarios() {
		if !sc.Spawns() {
			scenarios = append(scenarios, sc)
		}
	}
	const perResponse = 15
	runtimetest.CrashMatrixWith(t, newOpener, scenarios, runtimetest.MatrixHooks{
		Setup: func(t *testing.T, sc runtimetest.Scenario, h *Host) {
			o := h.Opener.(*logOpener)
			o.rec.Budget = l.budgetOf(runtime.Budget{Steps: sc.Budget})
			h.Ctrl.Reserve = func(ctx context.Context) error {
				err := o.current().reserve(ctx)
				if errors.Is(err, ErrBudget) {
					return fmt.Errorf("%w: %w", runtimetest.ErrBudgetExhausted, err)
				}
				return err
			}
			h.WrapModel = func(m model.Model) model.Model {
				return model.WithUsage(runtimetest.Reporting{Model: m, Usage: model.Usage{InputTokens: 10, OutputTokens: 5}}, recorder{inLog: o.current()})
			}
		},
		Check: func(t *testing.T, sc runtimetest.Scenario, h *Host, _ error) {
			o := h.Opener.(*logOpener)
			if err := o.current().end(ctx); err != nil { // as Node.attempt, after the last attempt
				t.Fatal(err)
			}
			c, err := s.LastLedger(ctx, o.prefix+h.Session, h.Run)
			if err != nil || c == nil {
				t.Fatalf("the run's last commit carries no totals: %v", err)
			}
			steps, tokens := c.Steps, c.InputTokens+c.OutputTokens
			if e, err := l.usage(ctx, o.rec.RootRunID); err == nil {
				if !e.InLog {
					t.Fatalf("side entry %+v not marked in_log", e)
				}
				steps += e.UsedSteps
				tokens += e.InputTokens + e.OutputTokens
			} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatal(err)
			}
			requests := len(h.Model.Requests())
			switch {
			case tokens != int64(perResponse*requests):
				t.Fatalf("%d tokens charged for %d model requests of %d each: each response's once", tokens, requests, perResponse)
			case steps < requests:
				t.Fatalf("%d steps charged for %d model requests: a request without a durable step", steps, requests)
			case sc.Budget > 0 && steps > sc.Budget:
				t.Fatalf("%d steps charged, the budget has %d", steps, sc.Budget)
			}
		},
	})
}

// Host is the crash matrix's host.
type Host = runtimetest.Host

// logOpener opens a run for an attempt of the crash matrix as Node.attempt
// does with the budget in the log: the previous attempt's end settled
// first, then the handle with a new attempt's inLog charging its commits.
// Its sessions and root are its own (prefix), on a shared server.
type logOpener struct {
	s      *cjs.Store
	l      *ledger
	prefix string
	rec    *events.Run

	mu  sync.Mutex
	cur *inLog
}

func (o *logOpener) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur != nil {
		if err := o.cur.end(ctx); err != nil {
			return nil, err
		}
	}
	h, err := o.s.Open(ctx, o.prefix+sessionID, runID)
	if err != nil {
		return nil, err
	}
	side := &budgetView{}
	if _, err := o.l.deadline(ctx, o.rec, side); err != nil {
		return nil, err
	}
	o.cur = newInLog(o.l, o.rec, h.(*cjs.RunStore), side)
	return h, nil
}

func (o *logOpener) current() *inLog {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cur
}
