package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// t1: where a lone run's time goes. Calc runs (10 run_js calls in one
// response, then complete) one after another on a node of their own; for
// each, the time from the start call to each of its writes (the time the
// server stored it, on the same clock: the server is in the process) and
// to its caller's result, averaged over the runs. The budget bucket keeps
// one message per key, so a run's budget writes show as its last one.
// The baseline is what the run's writes cost alone: its writes (every
// stream's, counted on the server) times a raw fenced publish's p50,
// measured in the same process just before, as if each waited alone; the
// ratio is that over the run's time (above 1: some writes overlap).
func t1(ctx context.Context, cfg config) ([]row, error) {
	c, err := startCalcNode(ctx, cfg.gc)
	if err != nil {
		return nil, err
	}
	defer c.done()
	js, _ := njs.New(c.nc)
	warm, runs := 30, 60
	if cfg.smoke {
		warm, runs = 1, 2
	}
	r := row{scenario: "T1", what: "a lone run's timeline: its writes and its result, from the start call (mean offsets, µs)",
		note: "SyncAlways; 10 run_js + complete; the budget bucket shows each run's last write only"}
	for rep := 0; rep < cfg.reps; rep++ {
		for range warm {
			if err := c.oneRun(ctx); err != nil {
				return nil, err
			}
		}
		raw, err := rawP50(ctx, js, runs*5)
		if err != nil {
			return nil, err
		}
		tl, err := timeline(ctx, c, js, runs)
		if err != nil {
			return nil, err
		}
		// Every write of a run (every stream's, counted on the server),
		// as if each waited alone for its own.
		writes := tl.writes
		r.ratio = append(r.ratio, writes*float64(raw)/float64(tl.total))
		r.cairn = fmt.Sprintf("run %s: %s", tl.total.Round(10*time.Microsecond), tl.desc)
		r.baseline = fmt.Sprintf("%.1f writes per run x raw fenced publish p50 %s = %s", writes, raw.Round(10*time.Microsecond), time.Duration(writes*float64(raw)).Round(10*time.Microsecond))
	}
	return []row{r}, nil
}

// rawP50 is the p50 of n raw fenced 1 KiB publishes, one at a time.
func rawP50(ctx context.Context, js njs.JetStream, n int) (time.Duration, error) {
	w := rawWriter(js, events.CheckpointSubject(fmt.Sprintf("t1raw%d", round.Add(1)), "r", false))
	d := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := w(ctx); err != nil {
			return 0, err
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d[len(d)/2], nil
}

type timelineResult struct {
	total  time.Duration
	writes float64 // per run, every stream's
	desc   string
}

// timeline runs n calc runs in turn and averages each write's offset from
// its run's start call, by its place in the run.
func timeline(ctx context.Context, c *calcNode, js njs.JetStream, n int) (timelineResult, error) {
	before, err := lastSeqs(ctx, js)
	if err != nil {
		return timelineResult{}, err
	}
	type span struct{ t0, t1 time.Time }
	spans := map[string]span{}
	for range n {
		t0 := time.Now()
		sess, run, err := c.node.Run(ctx, "calc", "Compute.")
		if err != nil {
			return timelineResult{}, err
		}
		if _, _, err := c.node.Result(ctx, sess, run); err != nil {
			return timelineResult{}, err
		}
		spans[run] = span{t0, time.Now()}
	}
	after, err := settledSeqs(ctx, js)
	if err != nil {
		return timelineResult{}, err
	}
	type ev struct {
		at    time.Time
		label string
	}
	byRun := map[string][]ev{}
	for name, last := range after {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return timelineResult{}, err
		}
		for seq := before[name] + 1; seq <= last; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // a KV key's older revision, removed
			}
			toks := strings.Split(m.Subject, ".")
			run, label := "", toks[len(toks)-1]
			if strings.HasPrefix(name, "KV_") {
				run, label = toks[len(toks)-1], strings.TrimPrefix(name, "KV_")
			} else if subj, err := events.ParseSubject(m.Subject); err == nil {
				run = subj.RunID
			}
			if _, ok := spans[run]; ok {
				byRun[run] = append(byRun[run], ev{m.Time, label})
			}
		}
	}
	var sums []time.Duration
	var labels []string
	var total time.Duration
	k := 0
	for run, sp := range spans {
		evs := byRun[run]
		sort.Slice(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
		evs = append(evs, ev{sp.t1, "result"})
		if labels == nil {
			for _, e := range evs {
				labels = append(labels, e.label)
			}
			sums = make([]time.Duration, len(evs))
		}
		if len(evs) != len(labels) {
			continue // a run whose writes came in another order (rare): left out
		}
		for i, e := range evs {
			sums[i] += e.at.Sub(sp.t0)
		}
		total += sp.t1.Sub(sp.t0)
		k++
	}
	if k == 0 {
		return timelineResult{}, fmt.Errorf("t1: no run's writes came in the first run's order")
	}
	// Each write's share of the run: the time since the one before it;
	// consecutive steps (the calls' commits) are added up into one part.
	type part struct {
		label string
		n     int
		d     time.Duration
	}
	var parts []part
	prev := time.Duration(0)
	for i, l := range labels {
		at := sums[i] / time.Duration(k)
		if n := len(parts); n > 0 && l == "step" && parts[n-1].label == "step" {
			parts[n-1].n++
			parts[n-1].d += at - prev
		} else {
			parts = append(parts, part{l, 1, at - prev})
		}
		prev = at
	}
	var desc []string
	for _, p := range parts {
		if p.n > 1 {
			desc = append(desc, fmt.Sprintf("%d x %s +%d", p.n, p.label, p.d.Microseconds()))
		} else {
			desc = append(desc, fmt.Sprintf("%s +%d", p.label, p.d.Microseconds()))
		}
	}
	var writes uint64
	for name, last := range after {
		writes += last - before[name]
	}
	return timelineResult{total: total / time.Duration(k), writes: float64(writes) / float64(n), desc: strings.Join(desc, ", ") + fmt.Sprintf(" (%d runs)", k)}, nil
}
