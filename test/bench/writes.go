package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime/model"
)

// w1: durable writes per tool call, counted on the server: every stream's
// last sequence (the log and each of the node's KV buckets: each write,
// batched or not, takes one) before and after whole runs of 10 run_js
// calls and complete, per run shape: the 10 calls in one model response
// (at 1 and at 64 runs at once), and one call per response (10 model
// steps, the peers' shape). The baseline is the physical minimum for a
// run in steady state, one write per call; the ratio is that over
// Cairn's count (1.0: one write per call).
func w1(ctx context.Context, cfg config) ([]row, error) {
	runsPer := map[int]int{1: 20, 64: 128}
	if cfg.smoke {
		runsPer = map[int]int{1: 2, 64: 4}
	}
	var rows []row
	for _, shape := range []struct {
		name  string
		model *model.Scripted
		concs []int
	}{
		{"10 run_js in one response + complete", calcSteps(calcCalls), []int{1, 64}},
		{"one run_js per response (10) + complete", calcStepwise(calcCalls), []int{1}},
	} {
		r, err := w1Shape(ctx, cfg, shape.name, shape.model, shape.concs, runsPer)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// w1Shape is W1's rows for one run shape, on a node of its own.
func w1Shape(ctx context.Context, cfg config, name string, calc *model.Scripted, concs []int, runsPer map[int]int) ([]row, error) {
	c, err := startCalcNodeWith(ctx, cfg.gc, calc)
	if err != nil {
		return nil, err
	}
	defer c.done()
	js, _ := njs.New(c.nc)
	var rows []row
	for _, conc := range concs {
		r := row{scenario: "W1", what: fmt.Sprintf("durable writes per tool call, %s, %d run(s) at once", name, conc), target: 1,
			note: "SyncAlways; every stream's sequences counted on the server"}
		for rep := 0; rep < cfg.reps; rep++ {
			before, err := lastSeqs(ctx, js)
			if err != nil {
				return nil, err
			}
			n := runsPer[conc]
			if err := calcRuns(ctx, c, n, conc); err != nil {
				return nil, err
			}
			after, err := settledSeqs(ctx, js)
			if err != nil {
				return nil, err
			}
			calls := float64(n * (calcCalls + 1))
			total := 0.0
			var parts []string
			for _, name := range sortedStreams(after) {
				d := float64(after[name] - before[name])
				if d == 0 {
					continue
				}
				total += d
				parts = append(parts, fmt.Sprintf("%s %.2f", strings.TrimPrefix(name, "KV_"), d/calls))
			}
			r.ratio = append(r.ratio, calls/total)
			r.cairn = fmt.Sprintf("%.2f writes per call (%s)", total/calls, strings.Join(parts, ", "))
			r.baseline = "1 write per call"
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// calcRuns runs n calc runs to their ends, conc at once.
func calcRuns(ctx context.Context, c *calcNode, n, conc int) error {
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.oneRun(ctx); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// lastSeqs is every stream's last sequence.
func lastSeqs(ctx context.Context, js njs.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return out, nil
}

// settledSeqs is lastSeqs once no stream has moved for a while: a run's
// last writes (its leaving the active set) follow the result its caller
// saw.
func settledSeqs(ctx context.Context, js njs.JetStream) (map[string]uint64, error) {
	prev, err := lastSeqs(ctx, js)
	if err != nil {
		return nil, err
	}
	for still := 0; still < 3; {
		time.Sleep(200 * time.Millisecond)
		cur, err := lastSeqs(ctx, js)
		if err != nil {
			return nil, err
		}
		still++
		for k, v := range cur {
			if prev[k] != v {
				still = 0
			}
		}
		prev = cur
	}
	return prev, nil
}

func sortedStreams(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
