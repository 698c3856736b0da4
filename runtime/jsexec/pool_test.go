package jsexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// newPoolFactory returns a ModeWorker factory of n workers with lim (zero
// fields default).
func newPoolFactory(t testing.TB, n int, lim Limits) *Factory {
	t.Helper()
	f, err := New(WithMode(ModeWorker), WithLimits(lim), WithWorkers(n))
	if err != nil {
		t.Fatal(err)
	}
	f.s.grace = testGrace
	return f
}

// hooks sets the pool's test hooks (either may be nil).
func (pl *pool) hooks(onWait func(), onStart func(pid int)) {
	pl.mu.Lock()
	pl.onWait, pl.onStart = onWait, onStart
	pl.mu.Unlock()
}

// procMax is the most child processes seen alive at once, read from /proc
// (zombies included).
type procMax struct {
	mu  sync.Mutex
	max int
}

func (m *procMax) sample() int {
	n := len(children())
	m.mu.Lock()
	m.max = max(m.max, n)
	m.mu.Unlock()
	return n
}

func (m *procMax) get() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max
}

// gatedCaps are the capabilities of gatedInvoke.
var gatedCaps = []jstool.CapabilityInfo{{Name: "hold"}, {Name: "meet"}, {Name: "block"}, {Name: "echo"}}

// gate answers "hold" once open is closed, "meet" once n calls have
// arrived, "block" once release is closed (telling entered first), and
// "echo" at once. Every call samples the processes alive first. A call
// that never gets its answer ends with its context, at the script's time
// limit: a broken pool fails the test instead of hanging it.
type gated struct {
	procs   *procMax
	open    chan struct{}
	once    sync.Once
	n       int
	mu      sync.Mutex
	arrived int
	met     chan struct{}
	entered chan struct{}
	release chan struct{}
}

func newGated(procs *procMax, meet int) *gated {
	return &gated{procs: procs, open: make(chan struct{}), n: meet, met: make(chan struct{}),
		entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (g *gated) opened() { g.once.Do(func() { close(g.open) }) }

func (g *gated) invoke(ctx context.Context, _ string, _ int, capability string, args json.RawMessage) (jstool.Value, error) {
	if g.procs != nil {
		g.procs.sample()
	}
	var wait chan struct{}
	switch capability {
	case "hold":
		wait = g.open
	case "meet":
		g.mu.Lock()
		g.arrived++
		if g.arrived == g.n {
			close(g.met)
		}
		g.mu.Unlock()
		wait = g.met
	case "block":
		g.entered <- struct{}{}
		wait = g.release
	}
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return jstool.Value{}, ctx.Err()
		}
	}
	return jstool.Value{JSON: args}, nil
}

func (g *gated) executor(t *testing.T, f *Factory) *workerExecutor {
	t.Helper()
	ex, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: gatedCaps, Invoke: g.invoke})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex.(*workerExecutor)
}

// TestPoolBoundsWorkers: 64 attempts run scripts at once on a pool of 4:
// no more than 4 worker processes are ever alive (counted in /proc at
// every worker start, in every callback, and by a sampler), scripts that
// find every worker busy wait rather than start another, and attempts
// between scripts (waiting on their model, say) hold no worker: with all
// 64 open and idle, the pool's 4 workers are idle, and 4 of the attempts
// then hold the 4 workers at once.
func TestPoolBoundsWorkers(t *testing.T) {
	leakCheck(t)
	const attempts, workers = 64, 4
	f := newPoolFactory(t, workers, Limits{})
	var seen procMax
	var waits atomic.Int64
	g := newGated(&seen, workers)
	f.pool.hooks(func() { waits.Add(1); g.opened() }, func(int) { seen.sample() })
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				seen.sample()
			}
		}
	}()
	defer func() {
		close(stop)
		<-sampled
	}()

	exs := make([]*workerExecutor, attempts)
	for i := range exs {
		exs[i] = g.executor(t, f)
	}
	runAll := func(exs []*workerExecutor, code, want string) {
		t.Helper()
		var wg sync.WaitGroup
		for i, ex := range exs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := ex.Execute(t.Context(), jstool.Script{CallID: fmt.Sprint("a", i), Code: code})
				if err != nil || out.Failure != nil || string(out.Value) != want {
					t.Errorf("attempt %d: %s, %+v, %v", i, out.Value, out.Failure, err)
				}
			}()
		}
		wg.Wait()
	}

	// Each first script holds its worker until some script waits for one:
	// 64 scripts on 4 workers must wait.
	runAll(exs, `return (await caps.hold({n: 1})).n`, `1`)
	if waits.Load() == 0 {
		t.Error("no script waited for a worker")
	}
	st := f.pool.stats()
	if st.live > workers || st.idle != st.live || st.waiting != 0 || st.open != attempts {
		t.Errorf("between scripts the pool is %+v: want at most %d workers, all idle, %d executors open", st, workers, attempts)
	}
	if n := seen.sample(); n != st.live {
		t.Errorf("%d worker processes alive; the pool counts %d", n, st.live)
	}

	// The other 60 attempts stay open, between scripts: 4 attempts hold
	// the 4 workers at once, meeting in their callbacks.
	runAll(exs[:workers], `return (await caps.meet({m: 2})).m`, `2`)

	runAll(exs, `return (await caps.echo({e: 3})).e`, `3`)
	if n := seen.get(); n > workers {
		t.Errorf("%d worker processes alive at once; the pool has %d", n, workers)
	}
	for _, ex := range exs {
		ex.Close()
	}
	if st := f.pool.stats(); st.live != 0 || st.open != 0 {
		t.Errorf("all executors closed, the pool is %+v", st)
	}
	if kids := children(); len(kids) != 0 {
		t.Errorf("all executors closed, processes %v are alive", kids)
	}
}

// TestPoolWaitHonoursContext: with the pool's one worker busy, a script
// waits for it without starting another process; its context ending ends
// the wait with a cancellation, and a script still waiting gets the worker
// when the busy one hands it back.
func TestPoolWaitHonoursContext(t *testing.T) {
	leakCheck(t)
	f := newPoolFactory(t, 1, Limits{})
	g := newGated(nil, 0)
	a, b := g.executor(t, f), g.executor(t, f)

	aDone := make(chan error, 1)
	go func() {
		out, err := a.Execute(t.Context(), jstool.Script{CallID: "a", Code: `return (await caps.block({v: "a"})).v`})
		if err == nil && (out.Failure != nil || string(out.Value) != `"a"`) {
			err = fmt.Errorf("outcome %s %+v", out.Value, out.Failure)
		}
		aDone <- err
	}()
	<-g.entered // a holds the worker

	ctx, cancel := context.WithCancel(t.Context())
	f.pool.hooks(cancel, nil)
	out, err := b.Execute(ctx, jstool.Script{CallID: "b", Code: `return 1`})
	if !errors.Is(err, context.Canceled) || out.Failure == nil || out.Failure.Kind != "cancelled" {
		t.Errorf("a wait cancelled: %v, %+v", err, out.Failure)
	}
	if st := f.pool.stats(); st.live != 1 || st.waiting != 0 {
		t.Errorf("after the cancelled wait the pool is %+v", st)
	}
	if kids := children(); len(kids) != 1 {
		t.Errorf("processes %v, want the one worker", kids)
	}

	waiting := make(chan struct{})
	f.pool.hooks(func() { close(waiting) }, nil)
	bDone := make(chan error, 1)
	go func() {
		out, err := b.Execute(t.Context(), jstool.Script{CallID: "b2", Code: `return 2`})
		if err == nil && (out.Failure != nil || string(out.Value) != `2`) {
			err = fmt.Errorf("outcome %s %+v", out.Value, out.Failure)
		}
		bDone <- err
	}()
	select {
	case <-waiting:
	case err := <-bDone:
		close(g.release)
		<-aDone
		t.Fatalf("b ran (%v) without waiting for the busy worker", err)
	}
	close(g.release)
	if err := <-aDone; err != nil {
		t.Errorf("a: %v", err)
	}
	if err := <-bDone; err != nil {
		t.Errorf("b: %v", err)
	}
	if a.pid() != b.pid() {
		t.Errorf("a ran in worker %d, b in %d: the worker was not handed over", a.pid(), b.pid())
	}
}

// TestPoolIsolatesRuns: two runs' scripts in the same worker, one after
// the other: what the first did to its realm (globals, polluted builtins,
// a hijacked JSON) and the capabilities it had are not the second's.
func TestPoolIsolatesRuns(t *testing.T) {
	leakCheck(t)
	f := newPoolFactory(t, 1, Limits{})
	fk := newFake()
	a := newTestExecutor(t, f, fk).(*workerExecutor)
	bk := newFake()
	b, err := f.NewExecutor(t.Context(), jstool.Config{Capabilities: []jstool.CapabilityInfo{{Name: "echo"}}, Invoke: bk.invoke})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	checkStep(t, run(t, a, "a", `
		globalThis.secret = "a's"; Object.prototype.polluted = "yes"; Array.prototype.map = null;
		JSON.stringify = () => "hijacked"; Object.defineProperty(globalThis, "trap", {get() { return "a's getter" }});
		caps.kv.set({key: "k", value: 1});
		return Object.keys(caps).length`), step{want: `8`})
	out := run(t, b, "b", `return [typeof secret, ({}).polluted, typeof [].map, JSON.stringify({a: 1}), typeof trap, Object.keys(caps),
		await caps.echo({b: 1}), typeof caps.kv]`)
	checkStep(t, out, step{want: `["undefined", null, "function", "{\"a\":1}", "undefined", ["echo"], {"b": 1}, "undefined"]`})
	if bw := b.(*workerExecutor); bw.pid() != a.pid() {
		t.Fatalf("a ran in worker %d, b in %d: want the same worker", a.pid(), bw.pid())
	}
}

// TestPoolHostileRunLeavesOthersAlone: a run's hostile script is contained
// in its worker, which is replaced (and reaped) before another run's
// script gets the slot; that script, and one of a third run that was
// running beside the hostile one, complete normally.
func TestPoolHostileRunLeavesOthersAlone(t *testing.T) {
	cases := []struct {
		name string
		lim  Limits
		code string
		kill bool // the worker is killed from outside mid-script
		// alone: no script runs beside (it would share the time limit)
		alone bool
		kind  string
		says  string
	}{
		{name: "one huge allocation", lim: memoryBomb, code: `return "x".repeat(2**31 - 1).length`, kind: "limit", says: "ran out of memory"},
		{name: "heap growth", lim: memoryBomb, code: `const m = new Map(); for (let i = 0; ; i++) m.set(i, {i, s: "v" + i})`, kind: "limit", says: "memory limit exceeded"},
		{name: "infinite loop", lim: Limits{Timeout: 300 * time.Millisecond}, code: `for (;;) {}`, alone: true, kind: "timeout", says: "time limit"},
		{name: "deep recursion", code: `const f = n => f(n + 1) + 1; return f(0)`, kind: "limit", says: "call stack"},
		{name: "killed mid-script", code: `await caps.block({}); return 1`, kill: true, kind: "exception", says: "killed by signal SIGKILL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leakCheck(t)
			f := newPoolFactory(t, 2, tc.lim)
			g := newGated(nil, 0)
			hostile, beside, next := g.executor(t, f), g.executor(t, f), g.executor(t, f)

			// beside holds the other worker, waiting on a callback.
			besideDone := make(chan error, 1)
			if tc.alone {
				besideDone <- nil
				g.entered <- struct{}{}
			} else {
				go func() {
					out, err := beside.Execute(t.Context(), jstool.Script{CallID: "beside", Code: `return (await caps.block({v: "beside"})).v`})
					if err == nil && (out.Failure != nil || string(out.Value) != `"beside"`) {
						err = fmt.Errorf("outcome %s %+v", out.Value, out.Failure)
					}
					besideDone <- err
				}()
			}
			<-g.entered

			hostileDone := make(chan jstool.Outcome, 1)
			go func() {
				out, err := hostile.Execute(t.Context(), jstool.Script{CallID: "hostile", Code: tc.code})
				if err != nil {
					t.Errorf("hostile: %v", err)
				}
				hostileDone <- out
			}()
			if tc.kill {
				<-g.entered
				if err := syscall.Kill(hostile.pid(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			out := <-hostileDone
			checkStep(t, out, step{kind: tc.kind, says: []string{tc.says}})
			bad := hostile.pid()

			// The next run's script gets the hostile one's slot.
			checkStep(t, run(t, next, "next", `return (await caps.echo({v: "next"})).v`), step{want: `"next"`})
			if next.pid() == bad {
				t.Errorf("worker %d ran another run's script after its hostile one", bad)
			}
			if !processGone(bad) {
				t.Errorf("worker %d of the hostile script is not reaped", bad)
			}
			close(g.release)
			if err := <-besideDone; err != nil {
				t.Errorf("the script beside the hostile one: %v", err)
			}
		})
	}
}

// TestWorkerRecycledAfterScripts: a worker runs workerScripts scripts,
// then is replaced and reaped.
func TestWorkerRecycledAfterScripts(t *testing.T) {
	leakCheck(t)
	f := newPoolFactory(t, 1, Limits{})
	f.s.workerScripts = 3
	ex := newTestExecutor(t, f, newFake()).(*workerExecutor)
	var pids []int
	for i := range 7 {
		checkStep(t, run(t, ex, fmt.Sprint("s", i), `return 1`), step{want: `1`})
		pids = append(pids, ex.pid())
	}
	if pids[0] != pids[2] || pids[3] != pids[5] || pids[2] == pids[3] || pids[5] == pids[6] {
		t.Errorf("workers by script %v: want each to run 3", pids)
	}
	if !processGone(pids[0]) || !processGone(pids[3]) {
		t.Errorf("replaced workers %d and %d are not reaped", pids[0], pids[3])
	}
}

// TestIdleWorkersStopWithTheLastExecutor: idle workers stay while an
// executor of the factory is open, and are stopped and reaped when the
// last one closes; the next executor starts a worker again.
func TestIdleWorkersStopWithTheLastExecutor(t *testing.T) {
	leakCheck(t)
	f := newPoolFactory(t, 2, Limits{})
	g := newGated(nil, 0)
	a, b := g.executor(t, f), g.executor(t, f)
	checkStep(t, run(t, a, "a", `return 1`), step{want: `1`})
	checkStep(t, run(t, b, "b", `return 2`), step{want: `2`})
	pid := a.pid()
	a.Close()
	if processGone(pid) {
		t.Errorf("worker %d stopped while an executor is open", pid)
	}
	checkStep(t, run(t, b, "b2", `return 3`), step{want: `3`})
	b.Close()
	if kids := children(); len(kids) != 0 {
		t.Errorf("the last executor closed, processes %v are alive", kids)
	}
	if st := f.pool.stats(); st != (poolStats{}) {
		t.Errorf("the last executor closed, the pool is %+v", st)
	}
	c := g.executor(t, f)
	checkStep(t, run(t, c, "c", `return 4`), step{want: `4`})
}

// TestSettleCollectsWhatAScriptLeft: between scripts, a worker whose heap
// is more than heapSlack past its base collects it, so that another run's
// script is not stopped at the memory limit for the garbage of the one
// before.
func TestSettleCollectsWhatAScriptLeft(t *testing.T) {
	lim := Limits{MemoryBytes: 64 << 20}.withDefaults()
	runtime.GC()
	base := heapBytes()
	garbage := make([][]byte, 32)
	for i := range garbage {
		garbage[i] = make([]byte, 1<<20)
	}
	runtime.KeepAlive(garbage)
	garbage = nil
	settle(base, lim)
	if h := heapBytes(); h > base+heapSlack(lim) {
		t.Errorf("heap %d MiB after settle, base %d MiB, slack %d MiB", h>>20, base>>20, heapSlack(lim)>>20)
	}
}

// bigScript holds 38 MiB, 60% of memoryBomb's limit, until it returns.
const bigScript = `const a = []; for (let i = 0; i < 38; i++) a.push("x".repeat(1 << 20) + i); return a.length`

// TestLargeScriptsOfTwoRunsInTurn: two runs' scripts in turn on a pool of
// one worker, each holding 60% of the memory limit until it returns: none
// is stopped for what the one before left. Without settle the second was
// stopped by the heap watchdog for the first's garbage; without retiring a
// worker whose address space grew, one was killed short of its headroom
// on a loaded machine (the address-space limit counts what Go keeps of
// the earlier heaps).
func TestLargeScriptsOfTwoRunsInTurn(t *testing.T) {
	leakCheck(t)
	f := newPoolFactory(t, 1, memoryBomb)
	a := newTestExecutor(t, f, newFake())
	b := newTestExecutor(t, f, newFake())
	for i := range 3 {
		checkStep(t, run(t, a, fmt.Sprint("a", i), bigScript), step{want: `38`})
		checkStep(t, run(t, b, fmt.Sprint("b", i), bigScript), step{want: `38`})
	}
}

// TestWorkerRetiredWhenItsAddressSpaceGrew: a worker waiting for a script
// never has an address space more than MemoryBytes past its idle size, so
// every script has at least 3/4 of a fresh worker's headroom under the
// address-space limit: one whose heap grew so far is replaced.
func TestWorkerRetiredWhenItsAddressSpaceGrew(t *testing.T) {
	leakCheck(t)
	f := newPoolFactory(t, 1, memoryBomb)
	ex := newTestExecutor(t, f, newFake()).(*workerExecutor)
	for i := range 3 {
		checkStep(t, run(t, ex, fmt.Sprint("big", i), bigScript), step{want: `38`})
		f.pool.mu.Lock()
		idle := slices.Clone(f.pool.idle)
		f.pool.mu.Unlock()
		for _, p := range idle {
			size, err := vmSizeOf(p.pid)
			if err != nil {
				t.Fatal(err)
			}
			if over := int64(size) - int64(p.ready.AddrIdle); over > memoryBomb.MemoryBytes {
				t.Errorf("worker %d waits for a script with its address space %d MiB past its idle size (limit %d MiB)", p.pid, over>>20, memoryBomb.MemoryBytes>>20)
			}
		}
	}
}

// vmSizeOf reads a process's VmSize in bytes.
func vmSizeOf(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, err
	}
	field, _, _ := strings.Cut(string(b), " ")
	pages, err := strconv.ParseUint(field, 10, 64)
	return pages * uint64(os.Getpagesize()), err
}

// TestWorkersOption: the bound defaults to DefaultWorkers(), at least 4;
// WithWorkers(0) means the default, a negative bound is refused.
func TestWorkersOption(t *testing.T) {
	f, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if f.Workers() != DefaultWorkers() || DefaultWorkers() < 4 || DefaultWorkers() < 2*runtime.GOMAXPROCS(0) {
		t.Errorf("workers %d, DefaultWorkers %d", f.Workers(), DefaultWorkers())
	}
	if f, err := New(WithWorkers(3)); err != nil || f.Workers() != 3 {
		t.Errorf("WithWorkers(3): %v", err)
	}
	if f, err := New(WithWorkers(0)); err != nil || f.Workers() != DefaultWorkers() {
		t.Errorf("WithWorkers(0): %v", err)
	}
	if _, err := New(WithWorkers(-1)); err == nil {
		t.Error("WithWorkers(-1) accepted")
	}
}
