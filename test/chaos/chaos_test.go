package chaos_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/test/chaos"
)

// One node on its embedded NATS server: kill -9 (also while it starts) and
// a full disk.
func TestOneNodeEmbeddedNATS(t *testing.T) {
	runTopology(t, chaos.Topology{Name: "one node, embedded NATS", Nodes: 1})
}

// One node on a nats-server process of its own, which the schedule also
// kills and restarts on the same port and store directory.
func TestOneNodeExternalNATS(t *testing.T) {
	runTopology(t, chaos.Topology{Name: "one node, external nats-server", Nodes: 1, ExternalNATS: true})
}

// Three nodes, each embedding a server of one NATS cluster (the log at
// three replicas): kill -9, SIGSTOP past the member TTL, a full disk.
func TestThreeNodes(t *testing.T) {
	runTopology(t, chaos.Topology{Name: "three nodes, clustered embedded NATS", Nodes: 3, MemberTTL: memberTTL})
}

// slowWake is the bound on wake latency (p99, outside NATS
// outages): the slowest wakes above it are listed.
const slowWake = 2 * time.Second

// cleanupMargin is the time kept, before the test's -timeout, to stop the
// processes, remove the mounts and report.
const cleanupMargin = 90 * time.Second

// config is the harness's settings, from the environment.
type config struct {
	seeds  []int64
	faults int
	// settle is how long after the last fault every run must have ended.
	settle time.Duration
	diskMB int
	// keep, when set, is a directory the processes' logs are copied to
	// (with goroutine dumps when runs are stuck).
	keep string
}

func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{faults: 4, settle: 60 * time.Second, diskMB: 512, keep: os.Getenv("CAIRN_CHAOS_KEEP")}
	positive := func(name string, into *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a whole number of at least 1", name, v)
			}
			*into = n
		}
	}
	seeds := 1
	positive("CAIRN_CHAOS_SEEDS", &seeds)
	positive("CAIRN_CHAOS_FAULTS", &c.faults)
	positive("CAIRN_CHAOS_DISK_MB", &c.diskMB)
	if v := os.Getenv("CAIRN_CHAOS_SETTLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("CAIRN_CHAOS_SETTLE=%q: want a positive duration such as 60s", v)
		}
		c.settle = d
	}
	if v := os.Getenv("CAIRN_CHAOS_SEED"); v != "" {
		seed, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CAIRN_CHAOS_SEED=%q: want an integer (a seed a test printed)", v)
		}
		c.seeds = []int64{seed}
		return c
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for range seeds {
		c.seeds = append(c.seeds, rng.Int64N(1e9))
	}
	return c
}

// figures are one seed's numbers.
type figures struct {
	seed           int64
	roots, runs    int
	stuck, failed  int
	lastFaultToEnd time.Duration
	wakes          []time.Duration
	// quiet are the wakes outside every fault and its recovery.
	quiet []time.Duration
}

func runTopology(t *testing.T, topo chaos.Topology) {
	cfg := loadConfig(t)
	var all []figures
	for _, seed := range cfg.seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (replay: CAIRN_CHAOS_SEED=%d CAIRN_CHAOS_FAULTS=%d go test -v -run '%s$' ./test/chaos)", seed, seed, cfg.faults, strings.Split(t.Name(), "/")[0])
			all = append(all, runSeed(t, cfg, topo, seed))
		})
	}
	if len(all) < 2 {
		return
	}
	var ends, wakes, quiet []time.Duration
	roots, stuck, failed := 0, 0, 0
	for _, f := range all {
		roots += f.roots
		stuck += f.stuck
		failed += f.failed
		ends = append(ends, f.lastFaultToEnd)
		wakes = append(wakes, f.wakes...)
		quiet = append(quiet, f.quiet...)
	}
	t.Logf("%s, %d seeds x %d faults: %d roots, stuck %d, failed %d; last fault to last end median %v max %v; wake p50 %v p99 %v (%d wakes); outside faults p50 %v p99 %v (%d wakes)",
		topo.Name, len(all), cfg.faults, roots, stuck, failed, chaos.Percentile(ends, 50).Round(time.Millisecond), chaos.Percentile(ends, 100).Round(time.Millisecond),
		chaos.Percentile(wakes, 50).Round(time.Millisecond), chaos.Percentile(wakes, 99).Round(time.Millisecond), len(wakes),
		chaos.Percentile(quiet, 50).Round(time.Millisecond), chaos.Percentile(quiet, 99).Round(time.Millisecond), len(quiet))
}

func runSeed(t *testing.T, cfg config, topo chaos.Topology, seed int64) figures {
	plan := chaos.Plan(seed, topo, cfg.faults)
	for i, f := range plan {
		t.Logf("fault %d: %s", i+1, f)
	}
	// Every wait ends a margin before the test's -timeout, so that the
	// processes are stopped and the mounts removed before go test gives up.
	ctx, cancel := context.WithCancel(context.Background())
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), d.Add(-cleanupMargin))
	}
	defer cancel()
	e := newEnv(t, topo, seed, cfg.diskMB)
	if err := e.waitReady(ctx); err != nil {
		e.report(nil, true)
		t.Fatalf("seed %d: first start: %v", seed, err)
	}
	cl := startClient(t, e)

	// The schedule, with room left for the settle and the audit.
	for i, f := range plan {
		if ctx.Err() != nil {
			t.Errorf("seed %d: stopped the schedule before fault %d of %d: out of time; give the test more (-timeout)", seed, i+1, len(plan))
			break
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < cfg.settle+30*time.Second+f.Gap+f.Hold+f.After {
			t.Errorf("seed %d: stopped the schedule before fault %d of %d: the test's -timeout leaves too little time; give it more (-timeout)", seed, i+1, len(plan))
			break
		}
		sleep(ctx, f.Gap)
		e.inject(ctx, f)
		if err := e.waitReady(ctx); err != nil {
			e.violate("after fault %d (%s): %v", i+1, f, err)
		}
	}
	e.mu.Lock()
	lastFault := e.lastHeal
	e.mu.Unlock()
	if lastFault.IsZero() {
		lastFault = time.Now()
	}
	retryUntil := lastFault.Add(cfg.settle)
	if d, ok := ctx.Deadline(); ok && d.Before(retryUntil) {
		retryUntil = d
	}
	cl.finish(retryUntil)
	subs, acked, unacked := cl.submissions()
	settleFrom := lastFault
	cl.mu.Lock()
	if cl.lastAck.After(settleFrom) {
		settleFrom = cl.lastAck
	}
	retried, attempts := cl.retried, cl.attempts
	cl.mu.Unlock()

	// Wait (on the log) until every run ended, or the settle deadline.
	nc, js, err := e.connect()
	if err != nil {
		e.report(nil, true)
		t.Fatalf("seed %d: %v", seed, err)
	}
	defer nc.Close()
	deadline := settleFrom.Add(cfg.settle)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	var rep *chaos.Report
	for {
		recs, err := e.readLog(ctx, js)
		if err != nil {
			e.report(nil, true)
			t.Fatalf("seed %d: %v", seed, err)
		}
		rep = chaos.Audit(recs, subs)
		if len(rep.Unended) == 0 || time.Now().After(deadline) {
			break
		}
		sleep(ctx, 2*time.Second)
	}
	if err := e.auditSteps(t, ctx, rep); err != nil {
		e.report(nil, true)
		t.Fatalf("seed %d: %v", seed, err)
	}

	wakes := rep.WakeLatencies()
	quiet := chaos.Quiet(rep.Wakes, e.windows())
	fig := figures{seed: seed, roots: rep.Roots, runs: len(rep.Runs), stuck: len(rep.Unended), failed: len(rep.Failed), wakes: wakes,
		quiet: chaos.Latencies(quiet)}
	if !rep.LastEnd.IsZero() {
		fig.lastFaultToEnd = max(rep.LastEnd.Sub(lastFault), 0)
	}
	var kinds []string
	e.mu.Lock()
	for _, k := range topo.Kinds() {
		if n := e.faults[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	e.mu.Unlock()
	var slow []chaos.Wake
	for _, w := range rep.Wakes {
		if w.Latency > slowWake {
			slow = append(slow, w)
		}
	}
	t.Logf("seed %d, %s: %d roots (%d runs, %d events); submissions %d sent, %d acknowledged, %d never, %d retried (%d requests); faults: %s",
		seed, topo.Name, rep.Roots, len(rep.Runs), rep.Events, len(subs), acked, unacked, retried, attempts, strings.Join(kinds, ", "))
	endNote := ""
	if fig.stuck > 0 {
		endNote = " (of the runs that ended)"
	}
	t.Logf("seed %d: stuck %d, failed %d; last fault to last end %v%s; wake p50 %v p99 %v max %v (%d wakes, %d over 2s); outside faults and their recovery p50 %v p99 %v max %v (%d wakes)",
		seed, fig.stuck, fig.failed, fig.lastFaultToEnd.Round(time.Millisecond), endNote,
		chaos.Percentile(wakes, 50).Round(time.Millisecond), chaos.Percentile(wakes, 99).Round(time.Millisecond), chaos.Percentile(wakes, 100).Round(time.Millisecond), len(wakes), len(slow),
		chaos.Percentile(fig.quiet, 50).Round(time.Millisecond), chaos.Percentile(fig.quiet, 99).Round(time.Millisecond), chaos.Percentile(fig.quiet, 100).Round(time.Millisecond), len(fig.quiet))
	sort.Slice(slow, func(i, j int) bool { return slow[i].Latency > slow[j].Latency })
	for _, w := range slow[:min(len(slow), 5)] {
		t.Logf("seed %d: slow wake: %s woke %v after its last child %s completed at %s", seed, w.Parent, w.Latency.Round(time.Millisecond), w.Child, w.At.Format("15:04:05.000"))
	}
	// The slow wakes outside every fault's window are the ones the bound
	// speaks of: each is named, to be looked up in the kept logs.
	sort.Slice(quiet, func(i, j int) bool { return quiet[i].Latency > quiet[j].Latency })
	for _, w := range quiet {
		if w.Latency <= slowWake {
			break
		}
		t.Logf("seed %d: slow wake outside faults: %s woke %v after its last child %s completed at %s", seed, w.Parent, w.Latency.Round(time.Millisecond), w.Child, w.At.Format("15:04:05.000"))
	}
	for _, p := range e.procs() {
		p.mu.Lock()
		var starts []string
		for _, l := range p.launches {
			switch {
			case l.killed != "":
				starts = append(starts, fmt.Sprintf("#%d %s: %s", l.n, l.cause, l.killed))
			case l.ready > 0:
				starts = append(starts, fmt.Sprintf("#%d %s: ready in %v", l.n, l.cause, l.ready.Round(time.Millisecond)))
			default:
				starts = append(starts, fmt.Sprintf("#%d %s: never seen ready", l.n, l.cause))
			}
		}
		exits := append([]string(nil), p.selfExits...)
		errs := append([]string(nil), p.errs...)
		p.mu.Unlock()
		t.Logf("seed %d: %s starts: %s", seed, p.name, strings.Join(starts, "; "))
		for _, x := range exits {
			t.Logf("seed %d: %s", seed, x)
		}
		for _, err := range errs {
			e.violate("%s: %s", p.name, err)
		}
		for _, c := range p.crashes() {
			e.violate("%s crashed:\n%s", p.name, c)
		}
	}
	e.mu.Lock()
	restarts := append([]string(nil), e.restarts...)
	e.mu.Unlock()
	if len(restarts) > 0 {
		t.Logf("seed %d: restarted by the liveness probe (/healthz failing %v): %s", seed, livenessWindow, strings.Join(restarts, ", "))
	}
	if unacked > 0 {
		for _, u := range cl.unackedErrs() {
			t.Logf("seed %d: never acknowledged: %s", seed, u)
		}
	}
	e.report(rep, false)
	return fig
}

// report fails the test on every violation, with the seed, the offending
// runs' last records and the node log lines that name them, and the tail
// of each process's log.
func (e *env) report(rep *chaos.Report, failing bool) {
	t := e.t
	e.mu.Lock()
	violations := append([]string(nil), e.violations...)
	e.mu.Unlock()
	if rep != nil {
		for _, v := range rep.Violations {
			violations = append(violations, v.Text)
		}
	}
	for _, v := range violations {
		t.Errorf("seed %d: %s", e.seed, v)
	}
	var stuck []string
	if rep != nil {
		stuck = rep.Unended
		for _, id := range stuck {
			t.Errorf("seed %d: run %s has no end (stuck): %s%s", e.seed, id, rep.Describe(id, 8), e.mentions(id))
		}
		for _, id := range rep.Failed {
			t.Logf("seed %d: failed run %s: %s%s", e.seed, id, rep.Describe(id, 8), e.mentions(id))
		}
	}
	kept := e.keepLogs(len(stuck) > 0)
	if kept || !t.Failed() && !failing {
		return
	}
	for _, p := range e.procs() {
		t.Logf("seed %d: --- %s log (tail):\n%s", e.seed, p.name, p.tail(40))
	}
}

// mentions is the processes' log lines that name id.
func (e *env) mentions(id string) string {
	var b strings.Builder
	for _, p := range e.procs() {
		for _, l := range p.grep(id, 6) {
			fmt.Fprintf(&b, "  %s: %.400s\n", p.name, l)
		}
	}
	if b.Len() == 0 {
		return "  (no process log line names it)\n"
	}
	return b.String()
}

// keepLogs copies the processes' logs to CAIRN_CHAOS_KEEP when set (pass or
// fail), after asking each live node for a goroutine dump (SIGQUIT) when
// runs are stuck.
func (e *env) keepLogs(dump bool) bool {
	cfgDir := os.Getenv("CAIRN_CHAOS_KEEP")
	if cfgDir == "" {
		return false
	}
	if dump {
		for _, p := range e.nodes {
			p.quit()
		}
	}
	dir := filepath.Join(cfgDir, fmt.Sprintf("%s-%d", strings.ReplaceAll(strings.Split(e.t.Name(), "/")[0], " ", "_"), e.seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Logf("keep logs: %v", err)
		return false
	}
	var names []string
	for _, p := range e.procs() {
		if err := copyFile(p.logPath, filepath.Join(dir, p.name+".log")); err != nil {
			e.t.Logf("keep logs: %v", err)
			return false
		}
		names = append(names, p.name+".log")
	}
	sort.Strings(names)
	e.t.Logf("seed %d: logs kept in %s (%s)", e.seed, dir, strings.Join(names, ", "))
	return true
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
