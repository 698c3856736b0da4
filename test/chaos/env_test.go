package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/test/chaos"
)

// chaosRouteSecret authenticates the routes between the clustered nodes'
// embedded NATS servers (CAIRN_NATS_ROUTE_SECRET).
const chaosRouteSecret = "chaos-test-route-secret-0123456789"

// env is one topology's processes for one seed.
type env struct {
	t     *testing.T
	topo  chaos.Topology
	seed  int64
	nodes []*proc
	nats  *proc // the external nats-server, or nil
	// disks is nil when data directories are tmpfs mounts that can fill;
	// otherwise why they are not.
	disks error

	// ops is held by a fault from its start to its end and by a liveness
	// restart: the two never act on a process at once.
	ops sync.Mutex

	mu         sync.Mutex
	violations []string
	// restarts are the liveness probe's restarts.
	restarts []string
	faults   map[chaos.Kind]int
	lastHeal time.Time
	// spans are the faults' times, from their start to their end.
	spans []span
}

// span is one fault's time and target.
type span struct {
	chaos.Window
	p *proc
}

// recoveryTail is added to the end of each fault's recovery when wakes
// outside outages are told apart: a node's membership and its NATS
// connection catch up within a member TTL of the fault's end.
const recoveryTail = memberTTL

// windows are the faults' times with their recoveries: a fault that
// restarted a process lasts until that process was first seen ready, and
// every fault a recoveryTail more; and the outages of processes restarted
// by their supervisor or the liveness probe.
func (e *env) windows() []chaos.Window {
	e.mu.Lock()
	spans := append([]span(nil), e.spans...)
	e.mu.Unlock()
	out := make([]chaos.Window, 0, len(spans))
	for _, s := range spans {
		w := s.Window
		s.p.mu.Lock()
		for _, l := range s.p.launches {
			if !l.at.Before(w.From) && l.ready > 0 {
				if ready := l.at.Add(l.ready); ready.After(w.To) {
					w.To = ready
				}
				break
			}
		}
		s.p.mu.Unlock()
		w.To = w.To.Add(recoveryTail)
		out = append(out, w)
	}
	// A process the supervisor or the liveness probe started again (one
	// that exited on a full disk, or hung) was out too: from when it went
	// (a second before the supervisor's start, or the probe's window
	// before its) until it was ready again.
	for _, p := range e.procs() {
		p.mu.Lock()
		for _, l := range p.launches {
			var before time.Duration
			switch l.cause {
			case "restarted by the supervisor after it exited":
				before = 2 * time.Second
			case "restarted by the liveness probe":
				before = livenessWindow + time.Second
			default:
				continue
			}
			out = append(out, chaos.Window{From: l.at.Add(-before), To: l.at.Add(l.ready).Add(recoveryTail)})
		}
		p.mu.Unlock()
	}
	return out
}

func (e *env) procs() []*proc {
	if e.nats != nil {
		return append([]*proc{e.nats}, e.nodes...)
	}
	return e.nodes
}

func (e *env) violate(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.violations = append(e.violations, fmt.Sprintf(format, args...))
}

// note logs what the harness does, with the time, to line up with the
// processes' logs.
func (e *env) note(format string, args ...any) {
	e.t.Logf("%s %s", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// newEnv lays out the topology's processes (ports, directories, tmpfs
// mounts) and starts them; its cleanup stops them and removes the mounts.
func newEnv(t *testing.T, topo chaos.Topology, seed int64, diskMB int) *env {
	t.Helper()
	return newEnvOf(t, topo, seed, diskMB, build(t, "node", "github.com/cairn-agents/cairn/cmd/node"))
}

// newEnvOf is newEnv with the nodes' binary.
func newEnvOf(t *testing.T, topo chaos.Topology, seed int64, diskMB int, nodeBin string) *env {
	t.Helper()
	agents, err := filepath.Abs("../../examples/agents")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, topo: topo, seed: seed, faults: map[chaos.Kind]int{}, disks: tmpfsAvailable()}
	// Directories first: t.TempDir's removal then runs after the cleanup
	// below has stopped the processes and unmounted their disks.
	newProc := func(name, bin string) *proc {
		dir := t.TempDir()
		p := &proc{name: name, bin: bin, logPath: filepath.Join(dir, name+".log"), data: filepath.Join(dir, "data")}
		if err := os.Mkdir(p.data, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if topo.ExternalNATS {
		natsBin := build(t, "nats-server", "github.com/nats-io/nats-server/v2")
		e.nats = newProc("nats", natsBin)
	}
	for i := range topo.Nodes {
		e.nodes = append(e.nodes, newProc(fmt.Sprintf("n%d", i+1), nodeBin))
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, p := range e.procs() {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
		wg.Wait()
		for _, p := range e.procs() {
			if p.mounted {
				if err := unmount(p.data); err != nil {
					t.Errorf("leaving a mount behind: %v", err)
				}
			}
		}
	})
	if e.disks == nil {
		for _, p := range e.procs() {
			if err := mountTmpfs(p.data, diskMB); err != nil {
				e.disks = err
				break
			}
			p.mounted = true
		}
	}
	if e.disks != nil {
		t.Logf("disk-full faults are skipped: this process cannot mount a tmpfs for the data directories (%v)", e.disks)
	}

	if e.nats != nil {
		p := e.nats
		p.client, p.monitor = natstest.FreePort(t), natstest.FreePort(t)
		conf := filepath.Join(filepath.Dir(p.logPath), "nats.conf")
		// SyncAlways, as Cairn's embedded server: an acknowledged write is on
		// disk.
		// Its storage limit is its disk's size, as docs/operations.md asks
		// of an operator: without one, a server restarted on a full disk
		// refuses every write after the space returns.
		body := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n  sync_interval: always\n  max_file_store: %dMB\n}\n",
			p.client, p.monitor, p.data, diskMB)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		p.args = []string{"-c", conf}
	}
	for _, p := range e.nodes {
		p.http, p.client, p.route = natstest.FreePort(t), natstest.FreePort(t), natstest.FreePort(t)
	}
	for _, p := range e.nodes {
		p.args = []string{"serve", "--agents", agents, "--data", p.data, "--listen", fmt.Sprintf("127.0.0.1:%d", p.http)}
		if e.nats != nil {
			p.args = append(p.args, "--nats", fmt.Sprintf("nats://127.0.0.1:%d", e.nats.client))
			continue
		}
		// The embedded server listens for clients too: the audit reads the
		// log through it.
		p.args = append(p.args, "--nats-listen", fmt.Sprintf("127.0.0.1:%d", p.client))
		if topo.Nodes > 1 {
			var routes []string
			for _, q := range e.nodes {
				if q != p {
					routes = append(routes, fmt.Sprintf("127.0.0.1:%d", q.route))
				}
			}
			p.args = append(p.args, "--node-name", p.name, "--nats-cluster", fmt.Sprintf("127.0.0.1:%d", p.route), "--nats-routes", strings.Join(routes, ","),
				"--member-ttl", topo.MemberTTL.String(), "--member-heartbeat", memberHeartbeat.String())
			// The routes' shared secret (the environment only): the
			// process harness passes no CAIRN_ variable on, so env(1) sets
			// it and execs the node (same process, same pid).
			envBin, err := exec.LookPath("env")
			if err != nil {
				t.Fatal(err)
			}
			p.args = append([]string{"CAIRN_NATS_ROUTE_SECRET=" + chaosRouteSecret, p.bin}, p.args...)
			p.bin = envBin
		}
	}
	for _, p := range e.procs() {
		if err := p.start("first start"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.liveness(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// livenessWindow is how long a process that was ready may fail its health
// check before its supervisor restarts it (a Kubernetes liveness probe's
// default is three failures 10 s apart).
const livenessWindow = 15 * time.Second

// liveness is the processes' supervisor's liveness probe: once a start has
// been ready, a process whose /healthz fails for livenessWindow is killed
// (a node with SIGQUIT first, for a goroutine dump in its log) and started
// again. It also records readiness the harness did not wait
// for (a start by the supervisor).
func (e *env) liveness(ctx context.Context) {
	failing := map[*proc]time.Time{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !e.ops.TryLock() {
			// A fault is under way: its own end is the start of a new watch.
			clear(failing)
			continue
		}
		for _, p := range e.procs() {
			l, running := p.current()
			p.mu.Lock()
			want, seen := p.wantUp, l != nil && l.ready > 0
			p.mu.Unlock()
			if !running || !want {
				delete(failing, p)
				continue
			}
			if !seen {
				p.checkReady()
				continue
			}
			if p.healthyNow() {
				delete(failing, p)
				continue
			}
			since, ok := failing[p]
			if !ok {
				failing[p] = time.Now()
				continue
			}
			if time.Since(since) < livenessWindow {
				continue
			}
			delete(failing, p)
			e.note("%s failed its health check for %v: its supervisor restarts it", p.name, livenessWindow)
			e.mu.Lock()
			e.restarts = append(e.restarts, fmt.Sprintf("%s at %s", p.name, time.Now().Format("15:04:05.000")))
			e.mu.Unlock()
			if p.monitor == 0 {
				// A node: its goroutines go to its log (SIGQUIT), to say where
				// it hung.
				p.quit()
			} else {
				p.kill()
			}
			if err := p.start("restarted by the liveness probe"); err != nil {
				e.violate("liveness restart of %s: %v", p.name, err)
			}
		}
		e.ops.Unlock()
	}
}

// waitReady waits until every process is ready, at most readyWithin.
func (e *env) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, readyWithin, fmt.Errorf("not ready within %v", readyWithin))
	defer cancel()
	errs := make(chan error, len(e.procs()))
	for _, p := range e.procs() {
		go func() { errs <- p.waitReady(ctx) }()
	}
	var failed []string
	for range e.procs() {
		if err := <-errs; err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		return fmt.Errorf("%s", strings.Join(failed, "; "))
	}
	return nil
}

func (e *env) target(f chaos.Fault) *proc {
	if f.Target == chaos.NATS {
		return e.nats
	}
	return e.nodes[f.Target]
}

// sleep waits out a stretch of the schedule (a gap, a hold): the schedule's
// own timing, not a wait for something to happen.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// inject runs one fault to its end (the process started again, the pause
// or the full disk over) and returns when that end was.
func (e *env) inject(ctx context.Context, f chaos.Fault) time.Time {
	e.ops.Lock()
	defer e.ops.Unlock()
	started := time.Now()
	p := e.target(f)
	e.mu.Lock()
	e.faults[f.Kind]++
	e.mu.Unlock()
	restart := func(cause string) {
		if err := p.start(cause); err != nil {
			e.violate("restart %s: %v", p.name, err)
		}
	}
	switch f.Kind {
	case chaos.KillNode, chaos.RestartNATS:
		e.note("kill -9 %s", p.name)
		p.kill()
		sleep(ctx, f.Hold)
		e.note("start %s", p.name)
		restart("after kill -9")
	case chaos.KillStarting:
		e.note("kill -9 %s", p.name)
		p.kill()
		sleep(ctx, f.Hold)
		restart("after kill -9")
		sleep(ctx, f.After)
		l, _ := p.current()
		ready := p.checkReady()
		p.kill()
		state := "before it was ready"
		if ready {
			state = "after it was ready"
		}
		p.mu.Lock()
		if !ready {
			l.killed = fmt.Sprintf("killed %v into its start, before it was ready", f.After)
		}
		p.mu.Unlock()
		e.note("kill -9 %s %v into its start, %s; start it again", p.name, f.After, state)
		restart("after kill -9 while starting")
	case chaos.PauseNode:
		// A node that exited by itself (a full disk) just before has
		// nothing to pause until its supervisor starts it again: the
		// fault is moot, not a failure of the harness (seen: seed
		// 897621922, "pause n3: os: process already finished").
		e.note("SIGSTOP %s", p.name)
		if err := p.signal(syscall.SIGSTOP); errors.Is(err, os.ErrProcessDone) {
			e.note("pause of %s skipped: it had exited; its supervisor starts it again", p.name)
		} else if err != nil {
			e.violate("pause %s: %v", p.name, err)
		}
		sleep(ctx, f.Hold)
		e.note("SIGCONT %s", p.name)
		if err := p.signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
			e.violate("resume %s: %v", p.name, err)
		}
	case chaos.FillDisk:
		if e.disks != nil {
			e.note("disk-full of %s skipped: %v", p.name, e.disks)
			break
		}
		n, err := fill(p.data)
		if err != nil {
			e.violate("fill the disk of %s: %v", p.name, err)
		}
		e.note("disk of %s full (%d MiB written)", p.name, n>>20)
		sleep(ctx, f.Hold)
		if err := unfill(p.data); err != nil {
			e.violate("%v", err)
		}
		e.note("disk of %s has space again", p.name)
	}
	healed := time.Now()
	e.mu.Lock()
	e.lastHeal = healed
	e.spans = append(e.spans, span{Window: chaos.Window{From: started, To: healed}, p: p})
	e.mu.Unlock()
	return healed
}

// connect is a NATS connection to every server of the topology.
func (e *env) connect() (*nats.Conn, jetstream.JetStream, error) {
	return e.connectAs(cjs.ReaderUser)
}

// connectAs connects as user (cjs.ReaderUser or cjs.AdminUser) where the
// servers have users, as connect does.
func (e *env) connectAs(user string) (*nats.Conn, jetstream.JetStream, error) {
	var urls []string
	if e.nats != nil {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", e.nats.client))
	} else {
		// Each node's server has its own credentials, in its data
		// directory: the audit reads as each one's reader, the least
		// privilege an event-stream consumer has.
		for _, p := range e.nodes {
			c, err := cjs.LoadCredentials(filepath.Join(p.data, "nats-credentials.json"))
			if err != nil {
				return nil, nil, err
			}
			pass := c.Reader
			if user == cjs.AdminUser {
				pass = c.Admin
			}
			urls = append(urls, fmt.Sprintf("nats://%s:%s@127.0.0.1:%d", user, pass, p.client))
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %v: %w", urls, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// readLog reads the whole run log, retrying for a minute while the servers
// settle (a leader election, a restart).
func (e *env) readLog(ctx context.Context, js jetstream.JetStream) ([]chaos.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		recs, err := chaos.ReadLog(rctx, js, "CAIRN")
		rcancel()
		if err == nil {
			return recs, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read the log: %w", err)
		case <-time.After(time.Second):
		}
	}
}

// auditSteps reads the budgets bucket's entries of the roots that keep
// their budget in their log and audits their step accounting.
// The reader user, the audit's for the log, may not read the bucket: it
// connects as the nodes do.
func (e *env) auditSteps(t *testing.T, ctx context.Context, rep *chaos.Report) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	nc, js, err := e.connectAs(cjs.AdminUser)
	if err != nil {
		return err
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, "cairn_budgets")
	if err != nil {
		return fmt.Errorf("budgets bucket: %w", err)
	}
	roots := rep.LedgerRoots()
	side := map[string]chaos.BudgetEntry{}
	for _, id := range roots {
		v, err := kv.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // nothing beside the log
		case err != nil:
			return fmt.Errorf("budget of %s: %w", id, err)
		}
		var b chaos.BudgetEntry
		if err := json.Unmarshal(v.Value(), &b); err != nil {
			return fmt.Errorf("budget of %s: %w", id, err)
		}
		side[id] = b
	}
	chaos.AuditSteps(rep, side)
	t.Logf("budget steps audited: %d roots keeping their budget in their log, %d with a side entry", len(roots), len(side))
	return nil
}
