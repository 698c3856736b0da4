package actors_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// outageNode starts a node with the planner (three workers) and a worker
// on nc, with one retry of a failed attempt (an outage must not spend
// it), its log records sent to log.
func outageNode(t *testing.T, nc *nats.Conn, parent, child model.Model, log slog.Handler) *actors.Node {
	t.Helper()
	h := &harness{nc: nc, parent: parent, child: child, log: log, maxRetries: 1}
	n := h.start(t)
	t.Cleanup(func() { closeNode(t, n) })
	return n
}

// heldChild is a worker whose model answers once released; entered
// receives a value each time it is asked.
type heldChild struct {
	entered chan struct{}
	release chan struct{}
}

func newHeldChild() *heldChild {
	return &heldChild{entered: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (h *heldChild) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return childModel{}.Generate(ctx, req)
}

// await receives n values from ch, failing the test after a (generous)
// deadline.
func await(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("%s: %d of %d after 2 minutes", what, i, n)
		}
	}
}

// failures counts the node's "attempt failed" records by run, and closes
// twice when one run's attempts have failed twice.
type failures struct {
	mu    sync.Mutex
	byRun map[string]int
	once  sync.Once
	twice chan struct{}
}

func newFailures() *failures {
	return &failures{byRun: map[string]int{}, twice: make(chan struct{})}
}

func (f *failures) Enabled(context.Context, slog.Level) bool { return true }
func (f *failures) WithAttrs([]slog.Attr) slog.Handler       { return f }
func (f *failures) WithGroup(string) slog.Handler            { return f }
func (f *failures) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "attempt failed") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "run" {
			return true
		}
		f.mu.Lock()
		f.byRun[a.Value.String()]++
		n := f.byRun[a.Value.String()]
		f.mu.Unlock()
		if n >= 2 {
			f.once.Do(func() { close(f.twice) })
		}
		return false
	})
	return nil
}

// tenRoots starts ten planner runs (three workers each) and waits until
// all thirty workers are in their model step.
func tenRoots(t *testing.T, n *actors.Node, child *heldChild) (roots [][2]string) {
	t.Helper()
	for i := range 10 {
		sess, run, err := n.Run(context.Background(), "planner", fmt.Sprintf("Round %d.", i))
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, [2]string{sess, run})
	}
	await(t, child.entered, 30, "workers in their model step")
	return roots
}

// allComplete checks that every root and every one of its workers
// completed (none failed, none still running).
func allComplete(t *testing.T, n *actors.Node, roots [][2]string) {
	t.Helper()
	for _, r := range roots {
		reply := result(t, n, r[0], r[1])
		if string(reply.Output) != `{"answer":"all three"}` {
			t.Fatalf("root %s: reply %s", r[1], reply.Output)
		}
		for _, call := range []string{"a", "b", "c"} {
			cs, cr := actors.ChildIDs(r[1], call)
			st, _, errText, err := n.Status(context.Background(), cs, cr)
			if err != nil || st != runtime.StatusCompleted {
				t.Fatalf("root %s, worker %s: %s %s %v; want completed", r[1], call, st, errText, err)
			}
		}
	}
}

// eventually calls cond until it holds, failing the test after a
// (generous) deadline. For states that change outside the node's events
// (a probe's answer); a last resort.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// D6 (liveness through a NATS outage): the NATS server stops mid-run,
// with every worker in its model step, and starts again on the same port
// and store directory only once some attempt has failed twice: an outage
// is not a failure, so with one retry allowed every run and every worker
// still completes, on the same node, and the node says it is not ready
// while the server is down.
func TestNATSRestartMidRun(t *testing.T) {
	dir, port := t.TempDir(), natstest.FreePort(t)
	start := func() *cjs.Server {
		srv, err := cjs.StartServer(cjs.ServerConfig{StoreDir: dir, Port: port})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close(context.Background()) })
		return srv
	}
	srv := start()
	down := make(chan struct{}, 1)
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { down <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	child, fails := newHeldChild(), newFailures()
	n := outageNode(t, nc, threeChildren(), child, fails)
	roots := tenRoots(t, n, child)
	if ok, reason := n.Ready(context.Background()); !ok {
		t.Fatalf("not ready before the outage: %s", reason)
	}

	_ = srv.Close(context.Background())
	await(t, down, 1, "the connection seeing the server gone")
	if ok, _ := n.Ready(context.Background()); ok {
		t.Fatal("ready while the NATS server is down")
	}
	close(child.release) // the workers' commits meet the outage
	await(t, fails.twice, 1, "an attempt failing twice")
	if ok, _ := n.Ready(context.Background()); ok {
		t.Fatal("ready while the NATS server is down")
	}

	start()
	allComplete(t, n, roots)
	eventually(t, "ready after the outage", func() bool { ok, _ := n.Ready(context.Background()); return ok })
}

// D6: the log refuses every write for a while (its stream full, as on a
// full disk) while the workers commit: the outage outlasts two attempts
// of a run allowed one retry, and once the log takes writes again every
// run and worker completes.
func TestRunOutlivesALogOutage(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	child, fails := newHeldChild(), newFailures()
	n := outageNode(t, nc, threeChildren(), child, fails)
	roots := tenRoots(t, n, child)
	refuse, restore := streamRefuse(t, nc, "CAIRN")
	refuse()
	close(child.release)
	await(t, fails.twice, 1, "an attempt failing twice")
	restore()
	allComplete(t, n, roots)
}

// refuseAll makes every stream of the server refuse writes (a full disk
// refuses them all) and returns what restores them.
func refuseAll(t *testing.T, nc *nats.Conn) (restore func()) {
	t.Helper()
	ctx := context.Background()
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var restores []func()
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		was := st.CachedInfo().Config
		full := was
		// Any message is larger than a byte: refused whatever expires.
		full.MaxBytes, full.Discard = 1, njs.DiscardNew
		if _, err := js.UpdateStream(ctx, full); err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		restores = append(restores, func() {
			if _, err := js.UpdateStream(ctx, was); err != nil {
				t.Errorf("stream %s: %v", name, err)
			}
		})
	}
	return func() {
		for _, r := range restores {
			r()
		}
	}
}

// D6 (truthful readiness): with every stream refusing writes the node is
// not ready, says why, and a start answers an outage at once with nothing
// written; once the streams take writes again it is ready and runs start
// and complete.
func TestFullLogIsNotReady(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	n := outageNode(t, nc, threeChildren(), childModel{}, slog.DiscardHandler)
	if ok, reason := n.Ready(context.Background()); !ok {
		t.Fatalf("not ready at start: %s", reason)
	}
	restore := refuseAll(t, nc)
	eventually(t, "not ready with every stream full", func() bool { ok, _ := n.Ready(context.Background()); return !ok })
	if _, reason := n.Ready(context.Background()); !strings.Contains(reason, "JetStream") {
		t.Fatalf("reason %q does not say JetStream refused the probe", reason)
	}
	began := time.Now()
	_, _, err := n.Run(context.Background(), "planner", "Refused.")
	if err == nil || !cjs.Unavailable(err) {
		t.Fatalf("start with every stream full: %v; want an outage", err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("start refused after %s", took)
	}
	restore()
	eventually(t, "ready again", func() bool { ok, _ := n.Ready(context.Background()); return ok })
	sess, run, err := n.Run(context.Background(), "planner", "Accepted.")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess, run)
}

// The completion consumer deleted under a running node (by an operator,
// a server that lost it) is created again: parents are still told of
// their children's ends.
func TestCompletionsSurviveAConsumerDeletion(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	n := outageNode(t, nc, threeChildren(), childModel{}, slog.DiscardHandler)
	sess, run, err := n.Run(context.Background(), "planner", "Before.")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess, run)
	js, _ := njs.New(nc)
	if err := js.DeleteConsumer(context.Background(), "CAIRN", "cairn_finished"); err != nil {
		t.Fatal(err)
	}
	sess, run, err = n.Run(context.Background(), "planner", "After.")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess, run)
}

// A readiness probe's answer stands for a second of the waits' clock
// (Config.Waits), then the next caller probes again: a /readyz polled in
// a loop costs one write a second, and an answer is never older than that.
func TestReadinessProbeAnswerStandsASecond(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	waits := clock.NewFake(time.Now())
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{}, waits: waits}
	n := h.start(t)
	t.Cleanup(func() { closeNode(t, n) })
	js, _ := njs.New(nc)
	probes := func() uint64 {
		t.Helper()
		s, err := js.Stream(context.Background(), "KV_cairn_ready")
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().State.LastSeq
	}
	ready := func() {
		t.Helper()
		if ok, why := n.Ready(context.Background()); !ok {
			t.Fatalf("not ready: %s", why)
		}
	}
	eventually(t, "ready", func() bool { ok, _ := n.Ready(context.Background()); return ok })
	before := probes()
	for range 5 {
		ready()
	}
	if got := probes(); got != before {
		t.Fatalf("%d probe writes within the second of the last; want none", got-before)
	}
	waits.Advance(time.Second - time.Nanosecond)
	ready()
	if got := probes(); got != before {
		t.Fatalf("%d probe writes before the second passed; want none", got-before)
	}
	waits.Advance(time.Nanosecond)
	ready()
	ready()
	if got := probes(); got != before+1 {
		t.Fatalf("%d probe writes once the second passed; want one", got-before)
	}
}

// A pull request of the completion consumer lives on the consumer's
// leader only: when that server dies (kill -9 of a node with its embedded
// server, in a cluster) the request dies with it, and nothing is delivered
// until Consume misses two heartbeats and pulls again. With nats.go's
// defaults (a 30s expiry, a 15s heartbeat) parents were woken 27-40s
// after their children ended (chaos seed 808184165); the node asks for a
// heartbeat every 2s and a pull of at most 10s, so such a stall lasts 4s.
func TestCompletionPullsAreShortAndBeat(t *testing.T) {
	srv := natstest.Server(t)
	next := natstest.Pulls(t, natstest.Connect(t, srv), "$JS.API.CONSUMER.MSG.NEXT.CAIRN.cairn_finished")
	outageNode(t, natstest.Connect(t, srv), threeChildren(), childModel{}, slog.DiscardHandler)
	if pull := next(); pull.Expires <= 0 || pull.Expires > 10*time.Second || pull.Heartbeat <= 0 || pull.Heartbeat > 2*time.Second {
		t.Fatalf("pull request: expires %v, heartbeat %v; want at most 10s and 2s", pull.Expires, pull.Heartbeat)
	}
}
