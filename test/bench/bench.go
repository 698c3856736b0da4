// Command bench measures Cairn against its physical limit, side by side in
// one process on one embedded NATS server started exactly as the node
// starts it, and prints a markdown table of ratios (the figure that matters
// on a shared, noisy machine).
//
//	go run ./test/bench                      # every scenario, 3 repetitions
//	go run ./test/bench -scenarios B1 -d 2s  # one scenario, shorter
//	go run ./test/bench -smoke               # a quick run that only checks it works (CI)
//
// Scenarios so far: B1 (fenced publish vs SaveCheckpoint) and B2 (one run's
// tool-call throughput vs raw commits per call), each at SyncAlways and, for
// B2, at the default sync interval too; B3-B8 (README, docs/performance.md);
// W1 (durable writes per tool call, by stream, counted on the server, by
// the shape of the run); W2 (log bytes per tool call, by the shape of the
// run); P1 (the peers' workload); T1 (where a lone run's time goes: each
// of its writes, from the start call to its result).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream"
)

type config struct {
	duration time.Duration
	// runDuration is B3's and B3gc's: their operation is a whole run,
	// which lasts about a second with 512 at once, so a slice must be
	// several seconds long to be more than its ramp.
	runDuration time.Duration
	reps        int
	writers     []int
	scenarios   map[string]bool
	// gc configures the store's group commit (zero: the defaults).
	gc jetstream.GroupCommit
	// parked: B5's numbers of parked runs.
	parked []int
	// b8Runs runs of b8Events events each make B8's busy stream.
	b8Runs, b8Events int
	// b7Runs: the runs whose log B7's run index is rebuilt from.
	b7Runs int
	// smoke: a run that only checks the harness (W1 makes few runs).
	smoke bool
	// heapProfile: where B5 writes a heap profile of its parked runs.
	heapProfile string
	// chain: B5's parked runs per blocked leaf.
	chain int
}

type row struct {
	scenario, what, cairn, baseline string
	ratio                           []float64
	target                          float64
	note                            string
}

func main() {
	jsexec.MaybeRunWorker()
	maybeServeNATS()
	d := flag.Duration("d", 3*time.Second, "duration of each measurement")
	reps := flag.Int("reps", 3, "repetitions (median and min-max are reported)")
	runD := flag.Duration("run-d", 16*time.Second, "duration of each measurement of B3 and B3gc (whole runs; slices of a quarter)")
	scen := flag.String("scenarios", "B1,B1gc,B1s,B2,B3,B3gc,B4,B5,B6,B7,B8,W1,W2,P1,T1", "scenarios to run")
	writers := flag.String("writers", "1,64,512", "concurrent writers (B1) and runs (B3)")
	parked := flag.String("parked", "10000", "parked runs for B5 (e.g. 10000,100000)")
	b8Runs := flag.Int("b8-runs", 1000, "B8: runs in the busy stream")
	b7Runs := flag.Int("b7-runs", 2000, "B7: runs whose log the run index is rebuilt from")
	b8Events := flag.Int("b8-events", 100, "B8: events per run")
	heapProfile := flag.String("heapprofile", "", "B5: write a heap profile of the parked runs to this file")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	allocProfile := flag.String("allocprofile", "", "write a heap profile at the end of the whole run to this file (its allocations: pprof -sample_index=alloc_space)")
	chain := flag.Int("chain", 10, "B5: parked runs per blocked leaf (each chain parks on one run blocked in its model)")
	smoke := flag.Bool("smoke", false, "a short run that only checks the harness works")
	var gc jetstream.GroupCommit
	flag.StringVar((*string)(&gc.Mode), "gc-mode", "", "group commit mode: adaptive (default), single or batch")
	flag.IntVar(&gc.Threshold, "gc-threshold", 0, "group commit: commits in flight from which to batch (0: default)")
	flag.IntVar(&gc.MinBatch, "gc-min", 0, "group commit: smallest batch (0: default)")
	flag.IntVar(&gc.MaxBatch, "gc-max", 0, "group commit: largest batch (0: default)")
	flag.IntVar(&gc.MaxInflight, "gc-inflight", 0, "group commit: batches in flight (0: default)")
	flag.Parse()
	cfg := config{duration: *d, runDuration: *runD, reps: *reps, scenarios: map[string]bool{}, gc: gc, b8Runs: *b8Runs, b8Events: *b8Events, b7Runs: *b7Runs, heapProfile: *heapProfile, chain: *chain}
	for _, s := range strings.Split(*scen, ",") {
		cfg.scenarios[strings.ToUpper(strings.TrimSpace(s))] = true
	}
	var err error
	if cfg.writers, err = ints("writers", *writers); err == nil {
		cfg.parked, err = ints("parked", *parked)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *smoke {
		cfg = smokeConfig(cfg.scenarios)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	rows, err := run(context.Background(), cfg)
	if err == nil {
		err = writeHeapProfile(*allocProfile, "")
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	print(os.Stdout, rows)
}

// ints parses a comma-separated list of positive integers.
func ints(flagName, list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// smokeConfig is a run small enough for CI that still drives every
// scenario's whole path.
func smokeConfig(scenarios map[string]bool) config {
	return config{smoke: true, duration: 200 * time.Millisecond, runDuration: 200 * time.Millisecond, reps: 1, writers: []int{1, 4}, scenarios: scenarios, parked: []int{20}, chain: 10, b8Runs: 10, b8Events: 10, b7Runs: 10}
}

func run(ctx context.Context, cfg config) ([]row, error) {
	var rows []row
	if cfg.scenarios["B1"] {
		r, err := b1(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["B1GC"] {
		r, err := b1gc(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["B1S"] {
		r, err := b1s(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["B2"] {
		for _, noSync := range []bool{false, true} {
			r, err := b2(ctx, cfg, noSync)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	if cfg.scenarios["B3"] {
		r, err := b3(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["B3GC"] {
		r, err := b3gc(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["B4"] {
		r, err := b4(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	if cfg.scenarios["B5"] {
		for _, n := range cfg.parked {
			r, err := b5(ctx, cfg, n)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	if cfg.scenarios["B6"] {
		r, err := b6(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["B7"] {
		r, err := b7(ctx, cfg, cfg.b7Runs)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	if cfg.scenarios["B8"] {
		r, err := b8(ctx, cfg, cfg.b8Runs, cfg.b8Events)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	if cfg.scenarios["W1"] {
		r, err := w1(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["P1"] {
		r, err := p1(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["T1"] {
		r, err := t1(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	if cfg.scenarios["W2"] {
		r, err := w2(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

func print(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| scenario | measure | Cairn | baseline (same process) | ratio median (min-max) | target | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		rs := append([]float64(nil), r.ratio...)
		sort.Float64s(rs)
		med := rs[len(rs)/2]
		target := "—"
		if r.target > 0 {
			target = fmt.Sprintf(">= %.1f", r.target)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f (%.2f-%.2f) | %s | %s |\n", r.scenario, r.what, r.cairn, r.baseline, med, rs[0], rs[len(rs)-1], target, r.note)
	}
}

// server starts an embedded server as the node does (SyncAlways unless
// noSync) in a temporary directory.
func server(noSync bool) (*jetstream.Server, *nats.Conn, func(), error) {
	dir, err := os.MkdirTemp("", "cairn-bench-")
	if err != nil {
		return nil, nil, nil, err
	}
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1, NoSync: noSync})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	nc, err := srv.Connect()
	if err != nil {
		_ = srv.Close(context.Background())
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	return srv, nc, func() { nc.Close(); _ = srv.Close(context.Background()); os.RemoveAll(dir) }, nil
}

type stats struct {
	rate     float64
	p50, p99 time.Duration
	elapsed  time.Duration
	// windowRate is the rate of the loader's counter while the phases
	// ran, the drain after each stop excluded (0 without a counter).
	windowRate float64
}

// loader runs commit functions, one per writer, and accumulates their
// count and latencies over every phase it runs.
type loader struct {
	fns     []func(context.Context) error
	lat     []time.Duration
	elapsed time.Duration
	// counter, when set, counts work that goes on inside an operation
	// (commits inside a run): read at each phase's start and stop, it
	// gives a rate without the drain, when operations in flight finish
	// and no new ones start, a state an operation as long as a run puts
	// a large share of a short phase in.
	counter      func() int64
	windowCount  int64
	windowLength time.Duration
}

func newLoader(writers int, newLog func(w int) (func(context.Context) error, error)) (*loader, error) {
	l := &loader{fns: make([]func(context.Context) error, writers)}
	for w := range l.fns {
		fn, err := newLog(w)
		if err != nil {
			return nil, err
		}
		l.fns[w] = fn
	}
	return l, nil
}

// phase runs every writer for d.
func (l *loader) phase(d time.Duration) error {
	lat := make([][]time.Duration, len(l.fns))
	var stop atomic.Bool
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := range l.fns {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				if err := l.fns[w](context.Background()); err != nil {
					once.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	var c0 int64
	if l.counter != nil {
		c0 = l.counter()
	}
	time.Sleep(d)
	stop.Store(true)
	if l.counter != nil {
		l.windowCount += l.counter() - c0
		l.windowLength += time.Since(start)
	}
	wg.Wait()
	l.elapsed += time.Since(start)
	for _, x := range lat {
		l.lat = append(l.lat, x...)
	}
	return firstErr
}

// ops is how many operations completed over every phase.
func (l *loader) ops() int { return len(l.lat) }

func (l *loader) stats() (stats, error) {
	if len(l.lat) == 0 {
		return stats{}, fmt.Errorf("no operation completed")
	}
	all := slices.Clone(l.lat)
	slices.Sort(all)
	st := stats{rate: float64(len(all)) / l.elapsed.Seconds(), p50: all[len(all)/2], p99: all[len(all)*99/100], elapsed: l.elapsed}
	if l.windowLength > 0 {
		st.windowRate = float64(l.windowCount) / l.windowLength.Seconds()
	}
	return st, nil
}

// load runs one loader for d.
func load(d time.Duration, writers int, newLog func(w int) (func(context.Context) error, error)) (stats, error) {
	l, err := newLoader(writers, newLog)
	if err != nil {
		return stats{}, err
	}
	if err := l.phase(d); err != nil {
		return stats{}, err
	}
	return l.stats()
}

// versus measures Cairn and its baseline over the same stretch of time:
// d each, in alternating slices (A B B A ...), so a disk or a neighbour
// that slows down for a second slows both sides alike. A ratio taken from
// two back-to-back runs was off by up to 2x on this machine.
func versus(d time.Duration, cairn, base *loader) (c, b stats, err error) {
	const slices = 4
	slice := d / slices
	for i := 0; i < slices; i++ {
		first, second := cairn, base
		if i%2 == 1 {
			first, second = base, cairn
		}
		if err := first.phase(slice); err != nil {
			return stats{}, stats{}, err
		}
		if err := second.phase(slice); err != nil {
			return stats{}, stats{}, err
		}
	}
	if c, err = cairn.stats(); err != nil {
		return stats{}, stats{}, err
	}
	b, err = base.stats()
	return c, b, err
}

var payload = strings.Repeat("x", 1024)

// rawWriter is the baseline: a 1 KiB publish fenced on its subject's last
// sequence, acknowledged synchronously.
func rawWriter(js njs.JetStream, subject string) func(context.Context) error {
	var last uint64
	return func(ctx context.Context) error {
		msg := nats.NewMsg(subject)
		msg.Data = []byte(payload)
		ack, err := js.PublishMsg(ctx, msg, njs.WithExpectLastSequenceForSubject(last, subject))
		if err == nil {
			last = ack.Sequence
		}
		return err
	}
}

var round atomic.Int64

// storeLoader runs writers concurrent runs' SaveCheckpoint of a 1 KiB
// message, each run's window loaded first as an activation does.
func storeLoader(ctx context.Context, s *jetstream.Store, writers int, prefix string) (*loader, error) {
	return newLoader(writers, func(w int) (func(context.Context) error, error) {
		h, err := s.Open(ctx, fmt.Sprintf("%s-%d", prefix, w), "r")
		if err != nil {
			return nil, err
		}
		if _, err := h.Load(ctx); err != nil {
			return nil, err
		}
		rev := int64(0)
		return func(ctx context.Context) error {
			rev++
			return h.SaveCheckpoint(ctx, &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseModel,
				Append: []model.Message{model.TextMessage(fmt.Sprintf("k-%d-0", rev), model.RoleUser, payload)}})
		}, nil
	})
}

// b1gc: group commit against the store's own single publishes, both
// through SaveCheckpoint on one server: a lone writer must not pay for
// batching, many writers must gain from it.
func b1gc(ctx context.Context, cfg config) ([]row, error) {
	_, nc, done, err := server(false)
	if err != nil {
		return nil, err
	}
	defer done()
	grouped, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc})
	if err != nil {
		return nil, err
	}
	single, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, writers := range cfg.writers {
		r := row{scenario: "B1gc", what: fmt.Sprintf("commits/s, %d writer(s): group commit vs single publishes", writers), target: 0.9,
			note: "SyncAlways; both through SaveCheckpoint; target: 1 writer >= 0.9 (latency within 1.1x), 512 writers >= 4"}
		if writers >= 512 {
			r.target = 4
		}
		for rep := 0; rep < cfg.reps; rep++ {
			id := round.Add(1)
			g, err := storeLoader(ctx, grouped, writers, fmt.Sprintf("gc-%d", id))
			if err != nil {
				return nil, err
			}
			one, err := storeLoader(ctx, single, writers, fmt.Sprintf("one-%d", id))
			if err != nil {
				return nil, err
			}
			st, base, err := versus(cfg.duration, g, one)
			if err != nil {
				return nil, err
			}
			r.ratio = append(r.ratio, st.rate/base.rate)
			r.cairn = fmt.Sprintf("%.0f/s p50 %s p99 %s", st.rate, st.p50.Round(10*time.Microsecond), st.p99.Round(10*time.Microsecond))
			r.baseline = fmt.Sprintf("single publishes %.0f/s p50 %s p99 %s", base.rate, base.p50.Round(10*time.Microsecond), base.p99.Round(10*time.Microsecond))
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// b1s: the payload codec's cost. SaveCheckpoint with every event sealed
// (AES-256-GCM, events.Keyring) against the same store without it, on one
// server, alternating.
func b1s(ctx context.Context, cfg config) ([]row, error) {
	_, nc, done, err := server(false)
	if err != nil {
		return nil, err
	}
	defer done()
	line, err := events.NewKey("bench")
	if err != nil {
		return nil, err
	}
	keys, err := events.ParseKeyring(line)
	if err != nil {
		return nil, err
	}
	sealed, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc, Keys: keys})
	if err != nil {
		return nil, err
	}
	plain, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc})
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, writers := range cfg.writers {
		r := row{scenario: "B1s", what: fmt.Sprintf("commits/s, %d writer(s): payload codec on vs off", writers), target: 0.9,
			note: "SyncAlways; both through SaveCheckpoint"}
		for rep := 0; rep < cfg.reps; rep++ {
			id := round.Add(1)
			on, err := storeLoader(ctx, sealed, writers, fmt.Sprintf("sealed-%d", id))
			if err != nil {
				return nil, err
			}
			off, err := storeLoader(ctx, plain, writers, fmt.Sprintf("plain-%d", id))
			if err != nil {
				return nil, err
			}
			st, base, err := versus(cfg.duration, on, off)
			if err != nil {
				return nil, err
			}
			r.ratio = append(r.ratio, st.rate/base.rate)
			r.cairn = fmt.Sprintf("%.0f/s p50 %s p99 %s", st.rate, st.p50.Round(10*time.Microsecond), st.p99.Round(10*time.Microsecond))
			r.baseline = fmt.Sprintf("plain %.0f/s p50 %s p99 %s", base.rate, base.p50.Round(10*time.Microsecond), base.p99.Round(10*time.Microsecond))
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// rawLoader is the baseline of writers concurrent writers, each on a
// subject of its own.
func rawLoader(js njs.JetStream, writers int) (*loader, error) {
	id := round.Add(1)
	return newLoader(writers, func(w int) (func(context.Context) error, error) {
		return rawWriter(js, events.CheckpointSubject(fmt.Sprintf("raw%d-%d", id, w), "r", false)), nil
	})
}

// b1: raw fenced publish vs SaveCheckpoint of an equivalent checkpoint.
func b1(ctx context.Context, cfg config) ([]row, error) {
	_, nc, done, err := server(false)
	if err != nil {
		return nil, err
	}
	defer done()
	var batches, batched atomic.Int64
	s, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc, OnBatch: func(ev jetstream.BatchEvent) {
		if ev.Err == nil {
			batches.Add(1)
			batched.Add(int64(ev.Size))
		}
	}})
	if err != nil {
		return nil, err
	}
	js, _ := njs.New(nc)
	var rows []row
	for _, writers := range cfg.writers {
		r := row{scenario: "B1", what: fmt.Sprintf("commits/s, %d writer(s)", writers), target: 0.8, note: "SyncAlways"}
		for rep := 0; rep < cfg.reps; rep++ {
			id := round.Add(1)
			base, err := rawLoader(js, writers)
			if err != nil {
				return nil, err
			}
			cairn, err := storeLoader(ctx, s, writers, fmt.Sprintf("b1-%d", id))
			if err != nil {
				return nil, err
			}
			batches.Store(0)
			batched.Store(0)
			st, raw, err := versus(cfg.duration, cairn, base)
			if err != nil {
				return nil, err
			}
			r.ratio = append(r.ratio, st.rate/raw.rate)
			r.cairn = fmt.Sprintf("%.0f/s p50 %s p99 %s", st.rate, st.p50.Round(10*time.Microsecond), st.p99.Round(10*time.Microsecond))
			if n := batches.Load(); n > 0 {
				r.cairn += fmt.Sprintf(", %.0f%% in batches of %.0f", 100*float64(batched.Load())/(st.rate*st.elapsed.Seconds()), float64(batched.Load())/float64(n))
			}
			r.baseline = fmt.Sprintf("%.0f/s p50 %s p99 %s", raw.rate, raw.p50.Round(10*time.Microsecond), raw.p99.Round(10*time.Microsecond))
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// b2: one run's tool-call throughput (scripted model, trivial run_js on the
// in-process executor, JetStream store) against raw fenced commits/s
// divided by the commits a call needs (one: a call's postresult is merged
// with the next call's predispatch; the response commit is amortized over
// the calls of the step).
func b2(ctx context.Context, cfg config, noSync bool) (row, error) {
	_, nc, done, err := server(noSync)
	if err != nil {
		return row{}, err
	}
	defer done()
	var commits atomic.Int64
	s, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc, OnCommit: func(ev jetstream.CommitEvent) {
		if ev.Err == nil {
			commits.Add(1)
		}
	}})
	if err != nil {
		return row{}, err
	}
	js, _ := njs.New(nc)
	exec, err := jsexec.New(jsexec.WithMode(jsexec.ModeInProcess))
	if err != nil {
		return row{}, err
	}
	note := "SyncAlways"
	if noSync {
		note = "default sync interval: NOT durable against power loss"
	}
	run := b2Run(exec)
	r := row{scenario: "B2", what: "tool calls/s, one run (10 steps x 10 run_js)", target: 0.8, note: note}
	var own []time.Duration
	for rep := 0; rep < cfg.reps; rep++ {
		id := round.Add(1)
		base, err := rawLoader(js, 1)
		if err != nil {
			return row{}, err
		}
		n := 0
		cairn, err := newLoader(1, func(int) (func(context.Context) error, error) {
			return func(ctx context.Context) error {
				n++
				h, err := s.Open(ctx, fmt.Sprintf("b2-%d-%d", id, n), "r")
				if err != nil {
					return err
				}
				return run(ctx, h)
			}, nil
		})
		if err != nil {
			return row{}, err
		}
		c0 := commits.Load()
		st, raw, err := versus(cfg.duration, cairn, base)
		if err != nil {
			return row{}, err
		}
		runs := st.rate * st.elapsed.Seconds()
		rate := st.rate * b2Calls
		// The commits a call needs, counted: one per call (its postresult
		// merged with the next call's predispatch), plus the run's start
		// and two per model step, spread over the calls.
		perCall := float64(commits.Load()-c0) / (runs * b2Calls)
		baseline := raw.rate / perCall
		r.ratio = append(r.ratio, rate/baseline)
		own = append(own, time.Duration(float64(time.Second)*(1/rate-1/baseline)))
		r.cairn = fmt.Sprintf("%.0f calls/s", rate)
		r.baseline = fmt.Sprintf("%.0f commits/s / %.2f commits per call = %.0f calls/s", raw.rate, perCall, baseline)
	}
	// Cairn's own time per call: its time per call less the commits'.
	slices.Sort(own)
	r.cairn += fmt.Sprintf(", Cairn's own time %s per call", own[len(own)/2].Round(time.Microsecond))
	return r, nil
}

// b2Calls is the tool calls of a B2 run: 10 steps of 10 run_js calls, then
// complete.
const b2Calls = 10*10 + 1

// b2Run returns B2's run: a scripted model's responses of 10 trivial
// run_js calls, 10 steps, then complete, on the in-process executor.
func b2Run(exec runtime.ExecutorFactory) func(context.Context, runtime.Store) error {
	// A response of 10 calls, 10 steps: what a model does, not a stress test
	// of a 100-call journal.
	return shapeRun(exec, w2Shape{name: "b2", perStep: 10, steps: 10})
}

// The environment variable that makes this binary (the harness or its test
// binary) a NATS server process for B5, so that the node's memory is
// measured without the server's.
const natsProcessEnv = "CAIRN_BENCH_NATS_DIR"

// maybeServeNATS serves NATS and never returns when this process was
// started as B5's server; main and TestMain call it first.
func maybeServeNATS() {
	dir := os.Getenv(natsProcessEnv)
	if dir == "" {
		return
	}
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, NoSync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench nats:", err)
		os.Exit(1)
	}
	fmt.Println(srv.ClientURL())
	select {}
}

// serverProcess starts NATS in a child process (NoSync: B5's memory does
// not depend on it) and connects to it.
func serverProcess() (*nats.Conn, func() uint64, func(), error) {
	dir, err := os.MkdirTemp("", "cairn-bench-")
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), natsProcessEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); os.RemoveAll(dir) }
	url, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("nats process: %w", err)
	}
	nc, err := nats.Connect(strings.TrimSpace(url), nats.MaxReconnects(-1))
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	rss := func() uint64 { return rssOf(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)) }
	return nc, rss, func() { nc.Close(); stop() }, nil
}

// rssOf reads VmRSS from a /proc status file (0 where there is none).
func rssOf(status string) uint64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
