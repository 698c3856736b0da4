package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
)

const (
	outSchema   = `{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}},"additionalProperties":false}`
	childSchema = `{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}},"additionalProperties":false}`
)

// nodeSetup is an actors.Node as cmd/node starts it: the JetStream store
// (with the harness's group commit settings), the in-process JavaScript
// executor, and three agents: calc (run_js only), planner (subagent
// worker) and worker.
type nodeSetup struct {
	calc, planner, worker model.Model
	sink                  func(events.Run, runtime.SinkEvent)
	idle                  time.Duration
	store                 jetstream.Config
	// executors wraps the executor factory (nil: the in-process one as is).
	executors func(runtime.ExecutorFactory) runtime.ExecutorFactory
}

func (ns nodeSetup) start(ctx context.Context, nc *nats.Conn) (*actors.Node, error) {
	exec, err := jsexec.New(jsexec.WithMode(jsexec.ModeInProcess))
	if err != nil {
		return nil, err
	}
	limits := runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}
	models := map[string]model.Model{"calc": ns.calc, "planner": ns.planner, "worker": ns.worker}
	var agents []actors.Agent
	for _, a := range []actors.Agent{
		{Definition: runtime.AgentDefinition{Slug: "calc", Instructions: "Compute.", OutputSchema: json.RawMessage(outSchema)}, Limits: limits, Budget: runtime.Budget{Steps: 100}},
		{Definition: runtime.AgentDefinition{Slug: "planner", Instructions: "Plan.", OutputSchema: json.RawMessage(outSchema), Subagents: []string{"worker"}}, Limits: limits, Budget: runtime.Budget{Steps: 100, Timeout: 24 * time.Hour}},
		{Definition: runtime.AgentDefinition{Slug: "worker", Instructions: "Work.", InputSchema: json.RawMessage(childSchema), OutputSchema: json.RawMessage(outSchema)}, Limits: limits},
	} {
		if models[a.Definition.Slug] != nil {
			agents = append(agents, a)
		}
	}
	var factory runtime.ExecutorFactory = exec
	if ns.executors != nil {
		factory = ns.executors(exec)
	}
	idle := ns.idle
	if idle == 0 {
		idle = 30 * time.Second
	}
	return actors.Start(ctx, actors.Config{
		Conn: nc, Store: ns.store, Agents: agents,
		Model:   func(a actors.Agent) (model.Model, error) { return models[a.Definition.Slug], nil },
		Backend: &runtimetest.Backend{}, Executors: factory, Redactor: runtime.Secrets{},
		Sink: ns.sink, IdleTimeout: idle,
	})
}

// calcSteps is one model step of n trivial run_js calls, then complete.
func calcSteps(n int) *model.Scripted {
	parts := make([]model.Part, n)
	for i := range parts {
		parts[i] = model.Call(fmt.Sprintf("c%d", i), "run_js", `{"code":"return 1"}`)
	}
	return &model.Scripted{NoRecord: true, Steps: []model.Response{
		model.Reply(parts...),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}
}

// calcStepwise is n model steps of one trivial run_js call each, then
// complete: the peers' shape, a model step per durable step.
func calcStepwise(n int) *model.Scripted {
	steps := make([]model.Response, 0, n+1)
	for i := range n {
		steps = append(steps, model.Reply(model.Call(fmt.Sprintf("c%d", i), "run_js", `{"code":"return 1"}`)))
	}
	steps = append(steps, model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)))
	return &model.Scripted{NoRecord: true, Steps: steps}
}

// workerModel completes at once, or, with a gate, once its input's key is
// released (or never: B5).
type workerModel struct {
	gate  func(input string) <-chan struct{}
	calls *atomic.Int64
}

func (m workerModel) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	input := req.Messages[0].Text()
	if m.calls != nil {
		m.calls.Add(1)
	}
	if m.gate != nil {
		select {
		case <-m.gate(input):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r := model.Reply(model.Call(fmt.Sprintf("done-%d", len(req.Messages)), "complete", `{"type":"output","output":{"answer":"done"}}`))
	return &r, nil
}

// calcNode is a node on a server of its own running calc runs (10 run_js
// calls and complete), counting its checkpoint commits by how they were
// published.
type calcNode struct {
	node                             *actors.Node
	nc                               *nats.Conn
	commits, batchedCommits, batches atomic.Int64
	// steps counts run_js executions, and gaps keeps the time between a
	// run's consecutive ones (the peers' step latency, P1).
	steps atomic.Int64
	gaps  gapLog
	done  func()
}

const calcCalls = 10 // run_js calls per calc run, plus complete

func startCalcNode(ctx context.Context, gc jetstream.GroupCommit) (*calcNode, error) {
	return startCalcNodeWith(ctx, gc, calcSteps(calcCalls))
}

// startCalcNodeWith is startCalcNode with calc's model given: a run shape
// of calcCalls run_js calls and complete.
func startCalcNodeWith(ctx context.Context, gc jetstream.GroupCommit, calc model.Model) (*calcNode, error) {
	_, nc, done, err := server(false)
	if err != nil {
		return nil, err
	}
	c := &calcNode{nc: nc}
	c.node, err = nodeSetup{calc: calc, executors: c.timed, store: jetstream.Config{GroupCommit: gc,
		OnCommit: func(ev jetstream.CommitEvent) {
			if ev.Err == nil {
				c.commits.Add(1)
				if ev.Mode == "batch" {
					c.batchedCommits.Add(1)
				}
			}
		},
		OnBatch: func(ev jetstream.BatchEvent) {
			if ev.Err == nil && ev.Stream == events.DefaultStream {
				c.batches.Add(1)
			}
		}}}.start(ctx, nc)
	if err != nil {
		done()
		return nil, err
	}
	c.done = func() { _ = c.node.Close(context.Background()); done() }
	return c, nil
}

// loader runs calc runs, each to its result. A run lasts up to seconds
// with 512 at once: its counter is the node's checkpoint commits, so the
// throughput is taken over the slices without the drain after each
// (when no run starts).
// oneRun runs one calc run to its end.
func (c *calcNode) oneRun(ctx context.Context) error {
	sess, run, err := c.node.Run(ctx, "calc", "Compute.")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	st, _, err := c.node.Result(ctx, sess, run)
	if err == nil && st != runtime.StatusCompleted {
		err = fmt.Errorf("run %s ended %s", run, st)
	}
	return err
}

func (c *calcNode) loader(runs int) (*loader, error) {
	l, err := newLoader(runs, func(w int) (func(context.Context) error, error) {
		return c.oneRun, nil
	})
	if err != nil {
		return nil, err
	}
	l.counter = c.commits.Load
	return l, nil
}

// calcMark is a node's counters at the start of a measurement.
type calcMark struct{ commits, batched, batches int64 }

func (c *calcNode) mark() calcMark {
	return calcMark{c.commits.Load(), c.batchedCommits.Load(), c.batches.Load()}
}

// calls is the tool-call rate of st (commits/s over the slices, at the
// counted commits per call) and a description with the batched share.
func (c *calcNode) calls(st stats, since calcMark) (calls, perCall float64, desc string) {
	commits := float64(c.commits.Load() - since.commits)
	perCall = commits / (st.rate * st.elapsed.Seconds() * (calcCalls + 1))
	calls = st.windowRate / perCall
	desc = fmt.Sprintf("%.0f calls/s (run p50 %s)", calls, st.p50.Round(100*time.Microsecond))
	if n := c.batches.Load() - since.batches; n > 0 {
		// Batches also carry run records and leases: the share is of checkpoint commits.
		desc += fmt.Sprintf(", %.0f%% of checkpoint commits batched, %d batches", 100*float64(c.batchedCommits.Load()-since.batched)/commits, n)
	}
	return calls, perCall, desc
}

// b3: aggregate tool calls/s through the actors (the node's path: a run
// actor per run, run_js on the in-process executor, the JetStream store
// with group commit) for 1, 64 and 512 concurrent runs, against raw
// fenced commits/s at the same concurrency divided by the checkpoint
// commits a call needs (counted, not assumed).
func b3(ctx context.Context, cfg config) ([]row, error) {
	c, err := startCalcNode(ctx, cfg.gc)
	if err != nil {
		return nil, err
	}
	defer c.done()
	js, _ := njs.New(c.nc)
	var rows []row
	for _, runs := range cfg.writers {
		r := row{scenario: "B3", what: fmt.Sprintf("tool calls/s, %d concurrent run(s) through the actors", runs), target: 0.8, note: "SyncAlways; 10 run_js + complete per run"}
		for rep := 0; rep < cfg.reps; rep++ {
			base, err := rawLoader(js, runs)
			if err != nil {
				return nil, err
			}
			cairn, err := c.loader(runs)
			if err != nil {
				return nil, err
			}
			m := c.mark()
			st, raw, err := versus(cfg.runDuration, cairn, base)
			if err != nil {
				return nil, err
			}
			calls, perCall, desc := c.calls(st, m)
			baseline := raw.rate / perCall
			r.ratio = append(r.ratio, calls/baseline)
			r.cairn = desc
			r.baseline = fmt.Sprintf("%.0f commits/s / %.2f commits per call = %.0f calls/s", raw.rate, perCall, baseline)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// b3gc: B3's node with group commit against the same node in single mode
// (every write of the log and of the KV buckets an fsync of its own), each
// on a server of its own on the same disk, in alternating slices.
func b3gc(ctx context.Context, cfg config) ([]row, error) {
	grouped, err := startCalcNode(ctx, cfg.gc)
	if err != nil {
		return nil, err
	}
	defer grouped.done()
	single, err := startCalcNode(ctx, jetstream.GroupCommit{Mode: jetstream.CommitSingle})
	if err != nil {
		return nil, err
	}
	defer single.done()
	var rows []row
	for _, runs := range cfg.writers {
		r := row{scenario: "B3gc", what: fmt.Sprintf("tool calls/s, %d concurrent run(s) through the actors: group commit vs single publishes", runs), target: 0.9,
			note: "SyncAlways; two nodes, a server each, one disk; target: 1 run >= 0.9, 512 runs >= 4"}
		if runs >= 512 {
			r.target = 4
		}
		for rep := 0; rep < cfg.reps; rep++ {
			g, err := grouped.loader(runs)
			if err != nil {
				return nil, err
			}
			one, err := single.loader(runs)
			if err != nil {
				return nil, err
			}
			gm, sm := grouped.mark(), single.mark()
			gst, sst, err := versus(cfg.runDuration, g, one)
			if err != nil {
				return nil, err
			}
			gcalls, _, gdesc := grouped.calls(gst, gm)
			scalls, _, sdesc := single.calls(sst, sm)
			r.ratio = append(r.ratio, gcalls/scalls)
			r.cairn, r.baseline = gdesc, "single publishes: "+sdesc
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// b4: the push path. A parent spawns 10 children and parks on them; the
// children are released only once the parent is parked; the figure is the
// time from the last child's completed commit to the parent's next
// commit, both as the server stamped them in the log. Reference: one raw
// fenced commit's latency in the same process.
func b4(ctx context.Context, cfg config) (row, error) {
	_, nc, done, err := server(false)
	if err != nil {
		return row{}, err
	}
	defer done()
	s, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc})
	if err != nil {
		return row{}, err
	}
	var gmu sync.Mutex
	gates := map[string]chan struct{}{}
	gate := func(key string) chan struct{} {
		gmu.Lock()
		defer gmu.Unlock()
		if gates[key] == nil {
			gates[key] = make(chan struct{})
		}
		return gates[key]
	}
	parkedCh := func(run string) chan struct{} { return gate("parked/" + run) }
	var spawns []model.Part
	var ids []string
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("s%d", i)
		spawns = append(spawns, model.Call(id, "spawn_worker", fmt.Sprintf(`{"n":%d}`, i)))
		ids = append(ids, `"`+id+`"`)
	}
	planner := &model.Scripted{NoRecord: true, Steps: []model.Response{
		model.Reply(spawns...),
		model.Reply(model.Call("w", "wait_calls", `{"ids":[`+strings.Join(ids, ",")+`],"timeout_seconds":3600}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ten"}}`)),
	}}
	var gen atomic.Int64
	node, err := nodeSetup{planner: planner, worker: workerModel{gate: func(input string) <-chan struct{} {
		return gate(fmt.Sprintf("round%d", gen.Load()))
	}}, sink: func(r events.Run, ev runtime.SinkEvent) {
		if ev.Kind == runtime.SinkWaiting {
			ch := parkedCh(r.RunID)
			gmu.Lock()
			select {
			case <-ch:
			default:
				close(ch)
			}
			gmu.Unlock()
		}
	}, store: jetstream.Config{GroupCommit: cfg.gc}}.start(ctx, nc)
	if err != nil {
		return row{}, err
	}
	defer func() { _ = node.Close(context.Background()) }()
	js, _ := njs.New(nc)
	stream, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		return row{}, err
	}
	rounds := max(5, int(cfg.duration/(100*time.Millisecond))) * cfg.reps
	if rounds > 200 {
		rounds = 200
	}
	var lat []time.Duration
	for i := 0; i < rounds; i++ {
		gen.Store(int64(i))
		sess, run, err := node.Run(ctx, "planner", fmt.Sprintf("Round %d.", i))
		if err != nil {
			return row{}, err
		}
		select {
		case <-parkedCh(run):
		case <-time.After(time.Minute):
			return row{}, fmt.Errorf("b4: run %s never parked", run)
		}
		close(gate(fmt.Sprintf("round%d", i)))
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		st, _, err := node.Result(rctx, sess, run)
		cancel()
		if err != nil || st != runtime.StatusCompleted {
			return row{}, fmt.Errorf("b4: run %s: %s %v", run, st, err)
		}
		children, err := node.Children(ctx, run)
		if err != nil || len(children) != 10 {
			return row{}, fmt.Errorf("b4: %d children, %v", len(children), err)
		}
		var last *njs.RawStreamMsg
		for _, c := range children {
			m, err := s.Last(ctx, events.CheckpointSubject(c.SessionID, c.RunID, true))
			if err != nil || m == nil {
				return row{}, fmt.Errorf("b4: child %s completion: %v", c.RunID, err)
			}
			if last == nil || m.Sequence > last.Sequence {
				last = m
			}
		}
		next, err := stream.GetMsg(ctx, last.Sequence+1, njs.WithGetMsgSubject(events.RunCheckpoints(sess, run)))
		if err != nil {
			return row{}, fmt.Errorf("b4: parent's commit after seq %d: %w", last.Sequence, err)
		}
		lat = append(lat, next.Time.Sub(last.Time))
	}
	slices.Sort(lat)
	raw, err := load(cfg.duration/4+time.Millisecond, 1, func(int) (func(context.Context) error, error) {
		return rawWriter(js, events.CheckpointSubject(fmt.Sprintf("rawb4%d", round.Add(1)), "r", false)), nil
	})
	if err != nil {
		return row{}, err
	}
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	return row{scenario: "B4", what: "push: last child's completed commit to the parent's next commit (10 children)",
		cairn:    fmt.Sprintf("p50 %s p99 %s (%d rounds)", p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), len(lat)),
		baseline: fmt.Sprintf("one fenced commit p50 %s p99 %s", raw.p50.Round(10*time.Microsecond), raw.p99.Round(10*time.Microsecond)),
		ratio:    []float64{float64(raw.p50) / float64(p50)}, note: "SyncAlways; the push path is a consumer delivery, the parent's attempt (its reads of the children; a live actor keeps its store handle: no lease write) and a commit; ratio = one commit's p50 / push p50"}, nil
}

// inParallel calls fn(0..n-1) with at most width calls at a time and
// returns the first error.
func inParallel(n, width int, fn func(i int) error) error {
	sem := make(chan struct{}, width)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		}()
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return err
}

// memory returns the heap in use after two collections and the process's
// resident set.
func memory() (heap, rss uint64) {
	goruntime.GC()
	goruntime.GC()
	// Return freed memory to the OS now, as the runtime's scavenger does
	// over minutes: the RSS is then what a settled node holds, not the
	// high-water mark of the setup's burst.
	debug.FreeOSMemory()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapInuse, rssOf("/proc/self/status")
}

// chainModel drives the chain agent: a run with depth > 0 spawns a chain
// of depth-1, waits for it (one-hour deadline) and completes; a run of
// depth 0 blocks in its model call until ctx ends.
type chainModel struct {
	calls, leaves *atomic.Int64
	never         <-chan struct{}
}

func (m chainModel) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	m.calls.Add(1)
	var in struct{ Depth int }
	if err := json.Unmarshal([]byte(req.Messages[0].Text()), &in); err != nil {
		return nil, fmt.Errorf("chain input: %w", err)
	}
	if in.Depth == 0 {
		m.leaves.Add(1)
		select {
		case <-m.never:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	last := ""
	for _, msg := range req.Messages {
		if msg.Role == model.RoleAssistant {
			if calls := msg.ToolCalls(); len(calls) > 0 {
				last = calls[0].Name
			}
		}
	}
	var r model.Response
	switch last {
	case "":
		r = model.Reply(model.Call("a", "spawn_chain", fmt.Sprintf(`{"depth":%d}`, in.Depth-1)))
	case "spawn_chain":
		r = model.Reply(model.Call("w", "wait_calls", `{"ids":["a"],"timeout_seconds":3600}`))
	default:
		r = model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"done"}}`))
	}
	return &r, nil
}

// b5: parked runs. A parked run waits (one-hour deadline) on its child,
// and its actor passivates. Runs are chains of depth chainDepth: every
// run but the last parks on the next, and the last blocks in its model
// call (something must be pending for the others to wait on). The cost of
// a blocked leaf is measured on its own first (leaves alone) and
// subtracted, so the figure is what a parked, passivated run costs the
// node. NATS runs in a process of its own, as with a NATS cluster: an
// embedded server's caches and subject index would otherwise be most of
// the growth; its RSS is reported apart. NoSync: memory does not depend
// on it, setup does.
func b5(ctx context.Context, cfg config, parkedRuns int) (row, error) {
	chainDepth := cfg.chain // parked runs per blocked leaf
	if cfg.heapProfile != "" {
		goruntime.MemProfileRate = 4096 // fine enough to attribute a few KB per run
	}
	chains := max(1, parkedRuns/chainDepth)
	n := chains * chainDepth
	nc, serverRSS, done, err := serverProcess()
	if err != nil {
		return row{}, err
	}
	defer done()
	never := make(chan struct{})
	var calls, leaves, parkedN atomic.Int64
	idle := time.Second
	limits := runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}
	chainSchema := `{"type":"object","required":["depth"],"properties":{"depth":{"type":"integer","minimum":0}},"additionalProperties":false}`
	node, err := actors.Start(ctx, actors.Config{
		Conn: nc, Store: jetstream.Config{GroupCommit: cfg.gc},
		Agents: []actors.Agent{{Definition: runtime.AgentDefinition{Slug: "chain", Instructions: "Chain.", InputSchema: json.RawMessage(chainSchema),
			OutputSchema: json.RawMessage(outSchema), Subagents: []string{"chain"}}, Limits: limits, Budget: runtime.Budget{Steps: 1000, Timeout: 24 * time.Hour}}},
		Model: func(actors.Agent) (model.Model, error) {
			return chainModel{calls: &calls, leaves: &leaves, never: never}, nil
		},
		Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{},
		Sink: func(r events.Run, ev runtime.SinkEvent) {
			if ev.Kind == runtime.SinkWaiting {
				parkedN.Add(1)
			}
		},
		IdleTimeout: idle,
	})
	if err != nil {
		return row{}, err
	}
	defer func() { _ = node.Close(context.Background()) }()
	waitFor := func(what string, v *atomic.Int64, want int64) error {
		deadline := time.Now().Add(10*time.Minute + time.Duration(n)*10*time.Millisecond)
		for v.Load() < want {
			if time.Now().After(deadline) {
				return fmt.Errorf("b5: %s: %d of %d", what, v.Load(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil
	}
	start := func(count, depth int) error {
		return inParallel(count, 256, func(int) error {
			_, _, err := node.Run(ctx, "chain", fmt.Sprintf(`{"depth":%d}`, depth))
			return err
		})
	}
	t0 := time.Now()
	heap0, rss0 := memory()
	// Phase 1: blocked leaves alone.
	if err := start(chains, 0); err != nil {
		return row{}, err
	}
	if err := waitFor("blocked leaves", &leaves, int64(chains)); err != nil {
		return row{}, err
	}
	time.Sleep(3 * idle)
	heap1, rss1 := memory()
	if err := writeHeapProfile(cfg.heapProfile, ".base"); err != nil {
		return row{}, err
	}
	// Phase 2: chains of chainDepth parked runs, each over a blocked leaf.
	if err := start(chains, chainDepth); err != nil {
		return row{}, err
	}
	if err := waitFor("parked runs", &parkedN, int64(n)); err != nil {
		return row{}, err
	}
	if err := waitFor("blocked leaves", &leaves, int64(2*chains)); err != nil {
		return row{}, err
	}
	time.Sleep(3*idle + 5*time.Second) // the parked runs' actors passivate; requests time out (3 s)
	heap2, rss2 := memory()
	live := node.LiveRuns()
	if err := writeHeapProfile(cfg.heapProfile, ""); err != nil {
		return row{}, err
	}
	// Signed: a small run can see the heap shrink between phases.
	leaf := (float64(heap1) - float64(heap0)) / float64(chains)
	perParked := ((float64(heap2) - float64(heap1)) - leaf*float64(chains)) / float64(n)
	// The node's RSS with the parked runs alone: the second set of blocked
	// leaves costs what the first did (rss1-rss0), taken out; projected
	// to 100,000 parked runs from the parked runs' share.
	parkedRSS := float64(rss2) - 2*float64(rss1-rss0) - float64(rss0)
	rssAt100k := (float64(rss0) + parkedRSS*100000/float64(n)) / (1 << 20)
	return row{scenario: "B5", what: fmt.Sprintf("parked runs: node RSS with %d parked, passivated runs (over %d blocked leaves, taken out)", n, chains),
		cairn: fmt.Sprintf("%.0f MB at 100,000 (%d MB at start, %.0f B RSS and %.0f B heap per parked run)", rssAt100k, rss0>>20, parkedRSS/float64(n), perParked),
		baseline: fmt.Sprintf("target 200 MB at 100,000; node RSS %d / %d / %d MB (start / +%d leaves / +%d parked and %d more leaves); a blocked leaf %.0f B of heap; NATS server RSS %d MB; run actors live at the end %d (the leaves); setup %s",
			rss0>>20, rss1>>20, rss2>>20, chains, n, chains, leaf, serverRSS()>>20, live, time.Since(t0).Round(time.Second)),
		ratio: []float64{200 / max(rssAt100k, 0.001)}, target: 1, note: "ratio = 200 MB / node RSS at 100,000 (measured at 100,000, projected from 10,000)"}, nil
}

// writeHeapProfile writes a heap profile to path+suffix, when path is set
// (compare the two of B5 with pprof -diff_base).
func writeHeapProfile(path, suffix string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path + suffix)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.WriteHeapProfile(f)
}

// b7: rebuilding the run index from sequence 1 against a raw ordered
// consumer reading the same subjects of the same stream (what the server
// must deliver for it). The log is made by real runs through the actors.
func b7(ctx context.Context, cfg config, runs int) (row, error) {
	_, nc, done, err := server(false)
	if err != nil {
		return row{}, err
	}
	defer done()
	node, err := nodeSetup{calc: calcSteps(3), store: jetstream.Config{GroupCommit: cfg.gc}}.start(ctx, nc)
	if err != nil {
		return row{}, err
	}
	err = inParallel(runs, 128, func(int) error {
		sess, run, err := node.Run(ctx, "calc", "Compute.")
		if err == nil {
			_, _, err = node.Result(ctx, sess, run)
		}
		return err
	})
	_ = node.Close(context.Background())
	if err != nil {
		return row{}, err
	}
	js, _ := njs.New(nc)
	stream, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		return row{}, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return row{}, err
	}
	total := info.State.Msgs
	cairn, err := newLoader(1, func(int) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			r, err := projections.Start(ctx, projections.Config{JS: js}, projections.NewRuns())
			if err != nil {
				return err
			}
			if err := r.CatchUp(ctx); err != nil {
				return err
			}
			return r.Close(ctx)
		}, nil
	})
	if err != nil {
		return row{}, err
	}
	base, err := newLoader(1, func(int) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			cons, err := stream.OrderedConsumer(ctx, njs.OrderedConsumerConfig{DeliverPolicy: njs.DeliverAllPolicy})
			if err != nil {
				return err
			}
			// Consume with a callback, as the projection runner does: the
			// same client path, without the projection's work.
			all := make(chan struct{})
			var got uint64
			cc, err := cons.Consume(func(njs.Msg) {
				if got++; got == total {
					close(all)
				}
			})
			if err != nil {
				return err
			}
			defer cc.Stop()
			select {
			case <-all:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, nil
	})
	if err != nil {
		return row{}, err
	}
	r := row{scenario: "B7", what: fmt.Sprintf("run index rebuild from sequence 1 (%d runs, %d events)", runs, total), target: 0.8,
		note: "stream events/s; baseline: a raw ordered consumer reading the whole stream (several wildcard filters on the server are slower than reading everything, so the index reads everything too)"}
	for rep := 0; rep < cfg.reps; rep++ {
		st, raw, err := versus(cfg.duration, cairn, base)
		if err != nil {
			return row{}, err
		}
		r.ratio = append(r.ratio, st.rate/raw.rate)
		r.cairn = fmt.Sprintf("%.0f events/s (rebuild p50 %s)", st.rate*float64(total), st.p50.Round(100*time.Microsecond))
		r.baseline = fmt.Sprintf("%.0f events/s (read p50 %s)", raw.rate*float64(total), raw.p50.Round(100*time.Microsecond))
	}
	return r, nil
}
