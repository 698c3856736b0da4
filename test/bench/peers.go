package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
)

// p1: Cairn's side of the peers' workload (docs/performance.md, Against
// DBOS and Restate): callers that each start a run of 10 durable steps
// (run_js calls, then complete), wait for its result and start the next,
// 1, 64 and 512 at once, measured as the peers' harness measures it:
// durable steps per second (run_js executions), the step latency (the
// time between a run's consecutive steps) and the durable writes per step
// (every stream's sequences, counted on the server). The baseline is the
// physical limit at the same concurrency: raw 1 KiB publishes fenced on
// their subject's last sequence, one per step, in alternating slices.
func p1(ctx context.Context, cfg config) ([]row, error) {
	c, err := startCalcNode(ctx, cfg.gc)
	if err != nil {
		return nil, err
	}
	defer c.done()
	js, _ := njs.New(c.nc)
	var rows []row
	for _, runs := range cfg.writers {
		r := row{scenario: "P1", what: fmt.Sprintf("durable steps/s, %d caller(s) (the peers' workload: 10 run_js + complete per run)", runs),
			note: "SyncAlways; ratio = steps/s over raw fenced commits/s at the same concurrency; the peers' figures: the table below"}
		if runs == 1 {
			r.target = 0.8
		}
		for rep := 0; rep < cfg.reps; rep++ {
			base, err := rawLoader(js, runs)
			if err != nil {
				return nil, err
			}
			cairn, err := c.loader(runs)
			if err != nil {
				return nil, err
			}
			cairn.counter = c.steps.Load // steps, not commits
			c.gaps.reset()
			seq0, err := lastSeqs(ctx, js)
			if err != nil {
				return nil, err
			}
			steps0 := c.steps.Load()
			st, raw, err := versus(cfg.runDuration, cairn, base)
			if err != nil {
				return nil, err
			}
			seq1, err := settledSeqs(ctx, js)
			if err != nil {
				return nil, err
			}
			steps := float64(c.steps.Load() - steps0)
			writes := -float64(base.ops()) // the baseline's publishes share the log's stream
			for name, s := range seq1 {
				writes += float64(s - seq0[name])
			}
			p50, p99 := c.gaps.percentiles()
			r.ratio = append(r.ratio, st.windowRate/raw.rate)
			r.cairn = fmt.Sprintf("%.0f steps/s, step p50 %s p99 %s, %.2f writes per step", st.windowRate, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), writes/steps)
			r.baseline = fmt.Sprintf("%.0f raw commits/s, p50 %s p99 %s", raw.rate, raw.p50.Round(10*time.Microsecond), raw.p99.Round(10*time.Microsecond))
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// timed wraps an executor factory so that every run_js execution counts
// as a step, and the time since the same executor's previous one (the
// same run's attempt) is a step's latency.
func (c *calcNode) timed(f runtime.ExecutorFactory) runtime.ExecutorFactory {
	return timedFactory{inner: f, c: c}
}

type timedFactory struct {
	inner runtime.ExecutorFactory
	c     *calcNode
}

func (f timedFactory) NewExecutor(ctx context.Context, cfg jstool.Config) (jstool.Executor, error) {
	ex, err := f.inner.NewExecutor(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &timedExecutor{inner: ex, c: f.c}, nil
}

type timedExecutor struct {
	inner jstool.Executor
	c     *calcNode
	last  time.Time
}

func (e *timedExecutor) Execute(ctx context.Context, s jstool.Script) (jstool.Outcome, error) {
	now := time.Now()
	e.c.steps.Add(1)
	if !e.last.IsZero() {
		e.c.gaps.add(now.Sub(e.last))
	}
	e.last = now
	return e.inner.Execute(ctx, s)
}

func (e *timedExecutor) Close() error { return e.inner.Close() }

// gapLog keeps step latencies.
type gapLog struct {
	mu   sync.Mutex
	gaps []time.Duration
}

func (g *gapLog) add(d time.Duration) {
	g.mu.Lock()
	g.gaps = append(g.gaps, d)
	g.mu.Unlock()
}

func (g *gapLog) reset() {
	g.mu.Lock()
	g.gaps = g.gaps[:0]
	g.mu.Unlock()
}

func (g *gapLog) percentiles() (p50, p99 time.Duration) {
	g.mu.Lock()
	all := slices.Clone(g.gaps)
	g.mu.Unlock()
	if len(all) == 0 {
		return 0, 0
	}
	slices.Sort(all)
	return all[len(all)/2], all[len(all)*99/100]
}
