package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/cluster"
	"github.com/cairn-agents/cairn/cluster/clustertest"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

const (
	outSchema   = `{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}},"additionalProperties":false}`
	childSchema = `{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}},"additionalProperties":false}`
)

// planner spawns two workers, waits for both and completes.
func planner() *model.Scripted {
	return &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`), model.Call("b", "spawn_worker", `{"n":2}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a","b"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"both"}}`)),
	}}
}

// worker completes at once, or when its gate opens.
type worker struct {
	gate  chan struct{}
	calls *atomic.Int64
}

func (w worker) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	w.calls.Add(1)
	if w.gate != nil {
		select {
		case <-w.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r := model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"done"}}`))
	return &r, nil
}

// counter counts log records that contain a phrase.
type counter struct {
	slog.Handler
	phrase string
	n      *atomic.Int64
}

func (c counter) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, c.phrase) {
		c.n.Add(1)
	}
	return nil
}
func (c counter) Enabled(context.Context, slog.Level) bool { return true }
func (c counter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c counter) WithGroup(string) slog.Handler            { return c }

// node is one in-process Cairn node with its providers (one per member
// incarnation) and its membership bucket's faults.
type node struct {
	*actors.Node
	kv        *faultyKV
	mu        sync.Mutex
	providers []*cluster.Provider
	fenced    atomic.Int64 // attempts fenced out on this node
}

func (n *node) provider() *cluster.Provider {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.providers[len(n.providers)-1]
}

func startNode(t *testing.T, nc *nats.Conn, kv jetstream.KeyValue, name string, w worker, tc *tls.Config) *node {
	t.Helper()
	n := &node{kv: &faultyKV{KV: kv}}
	logger := slog.New(counter{Handler: slog.DiscardHandler, phrase: "attempt fenced out", n: &n.fenced})
	an, err := actors.Start(context.Background(), actors.Config{
		Conn: nc,
		Agents: []actors.Agent{
			{Definition: runtime.AgentDefinition{Slug: "planner", Instructions: "Plan.", OutputSchema: json.RawMessage(outSchema), Subagents: []string{"worker"}},
				Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}, Budget: runtime.Budget{Steps: 50}},
			{Definition: runtime.AgentDefinition{Slug: "worker", Instructions: "Work.", InputSchema: json.RawMessage(childSchema), OutputSchema: json.RawMessage(outSchema)},
				Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}},
		},
		Model: func(a actors.Agent) (model.Model, error) {
			if a.Definition.Slug == "planner" {
				return planner(), nil
			}
			return w, nil
		},
		Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{},
		Logger: logger, IdleTimeout: 5 * time.Second, DrainTimeout: time.Second, MaxRetries: 20,
		Cluster: &actors.ClusterConfig{Name: name, SweepInterval: time.Second, TLS: tc, Provider: func() (pcluster.ClusterProvider, error) {
			p, err := cluster.NewProvider(cluster.Config{KV: n.kv, TTL: ttl, Heartbeat: 200 * time.Millisecond, Name: name, Reads: events.SchemaVersion})
			if err == nil {
				n.mu.Lock()
				n.providers = append(n.providers, p)
				n.mu.Unlock()
			}
			return p, err
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Node = an
	t.Cleanup(func() { _ = an.Close(context.Background()) })
	return n
}

func startNodes(t *testing.T, w worker) (*nats.Conn, jetstream.JetStream, []*node) {
	t.Helper()
	return startNodesTLS(t, w, nil)
}

// startNodesTLS is startNodes with the members' remote on mutual TLS (nil:
// clear text).
func startNodesTLS(t *testing.T, w worker, tc *tls.Config) (*nats.Conn, jetstream.JetStream, []*node) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Server(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := cluster.Bucket(context.Background(), js, cluster.BucketConfig{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*node{startNode(t, nc, kv, "n1", w, tc), startNode(t, nc, kv, "n2", w, tc), startNode(t, nc, kv, "n3", w, tc)}
	for _, n := range nodes {
		eventually(t, "three members", func() bool { return len(n.provider().Members()) == 3 })
	}
	return nc, js, nodes
}

type root struct{ session, run string }

func startRoots(t *testing.T, n *node, count int) []root {
	t.Helper()
	var roots []root
	for i := range count {
		s, r, err := n.Run(context.Background(), "planner", fmt.Sprintf("Task %d.", i))
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, root{s, r})
	}
	return roots
}

func waitRoots(t *testing.T, n *node, roots []root) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, r := range roots {
		st, reply, err := n.Result(ctx, r.session, r.run)
		if err != nil || st != runtime.StatusCompleted || string(reply.Output) != `{"answer":"both"}` {
			t.Fatalf("root %s: %s %v %v", r.run, st, reply, err)
		}
	}
}

func checkLog(t *testing.T, js jetstream.JetStream, runs int) *clustertest.Report {
	t.Helper()
	rep, err := clustertest.Check(context.Background(), js, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Error(v)
	}
	if len(rep.Runs) != runs {
		t.Errorf("%d runs in the log, want %d", len(rep.Runs), runs)
	}
	if inc := rep.Incomplete(); len(inc) > 0 {
		t.Errorf("runs never completed: %v", inc)
	}
	return rep
}

// nodeOf names the node of a lease holder (member IDs are <name>-<random>).
func nodeOf(holder string) string { name, _, _ := strings.Cut(holder, "-"); return name }

// Runs started through one node run on every member and complete once.
func TestRunsSpreadAcrossMembers(t *testing.T) {
	runsSpread(t, nil)
}

// The same over mutual TLS (the members' gRPC link): runs placed on other
// members reach them, and the remote refuses a peer without a certificate
// of the CA.
func TestRunsSpreadAcrossMembersOverTLS(t *testing.T) {
	files := natstest.TLSFiles(t)
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(files.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	nodes := runsSpread(t, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12})
	m := nodes[1].provider().Members()[0]
	addr := net.JoinHostPort(m.Host, strconv.Itoa(int(m.Port)))
	// Without a client certificate the handshake (or, in TLS 1.3, the
	// first read after it) fails.
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a peer without a certificate: %v, want a refusal", err)
	}
	// With one, it is let in.
	conn, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("a peer with the CA's certificate: %v", err)
	}
	conn.Close()
}

func runsSpread(t *testing.T, tc *tls.Config) []*node {
	calls := &atomic.Int64{}
	_, js, nodes := startNodesTLS(t, worker{calls: calls}, tc)
	roots := startRoots(t, nodes[0], 9)
	waitRoots(t, nodes[0], roots)
	rep := checkLog(t, js, 27)
	ran := map[string]int{}
	for _, r := range rep.Runs {
		for _, l := range r.Leases {
			ran[nodeOf(l.Holder)]++
		}
	}
	if len(ran) < 2 {
		t.Errorf("27 runs all ran on %v", ran)
	}
	t.Logf("leases by node: %v", ran)
	return nodes
}

// A member that cannot reach the membership bucket for longer than the TTL
// (a pause, a partition) is removed; the others take its runs over from
// the log; its stale attempts, still running, are fenced out when they
// commit; once it reaches NATS again it is expelled and joins again as a
// new member. Every run completes once.
func TestExpiredMemberIsFencedOutAndRejoins(t *testing.T) {
	gate := make(chan struct{})
	calls := &atomic.Int64{}
	_, js, nodes := startNodes(t, worker{gate: gate, calls: calls})
	n1, n3 := nodes[0], nodes[2]
	oldID := n3.MemberID()
	roots := startRoots(t, n1, 9)
	eventually(t, "every worker waiting in its model", func() bool { return calls.Load() >= 18 })
	rep, err := clustertest.Check(context.Background(), js, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	var onN3 []string
	for id, r := range rep.Runs {
		if n := len(r.Leases); n > 0 && r.Leases[n-1].Holder == oldID {
			onN3 = append(onN3, id)
		}
	}
	if len(onN3) == 0 {
		t.Fatal("no run on n3; nothing to take over")
	}
	// n3 loses the bucket: no heartbeat, no watch. It still runs its
	// attempts and believes it is a member.
	n3.kv.set(func(f *faultyKV) { f.failUpdate, f.failWatch = true, true })
	eventually(t, "n1 and n2 removed n3", func() bool {
		return len(nodes[0].provider().Members()) == 2 && len(nodes[1].provider().Members()) == 2
	})
	eventually(t, "n3's runs taken over", func() bool {
		rep, err := clustertest.Check(context.Background(), js, "CAIRN")
		if err != nil {
			return false
		}
		for _, id := range onN3 {
			if l := rep.Runs[id].Leases; l[len(l)-1].Holder == oldID {
				return false
			}
		}
		return true
	})
	close(gate) // n3's stale attempts and the new owners' attempts all commit now
	eventually(t, "a stale attempt on n3 fenced out", func() bool { return n3.fenced.Load() > 0 })
	n3.kv.set(func(f *faultyKV) { f.failUpdate, f.failWatch = false, false })
	eventually(t, "n3 joined again under a new ID", func() bool {
		id := n3.MemberID()
		if id == oldID {
			return false
		}
		return ids(n1.provider().Members())[id] && len(n1.provider().Members()) == 3
	})
	waitRoots(t, n1, roots)
	checkLog(t, js, 27)
	t.Logf("runs on n3 taken over: %d; stale attempts fenced out on n3: %d", len(onN3), n3.fenced.Load())
}

// A run whose latest lease another live member holds, and which no member
// runs, is taken back by its owner's sweep once that lease is two sweeps
// old. Here a store holding another member's name opens a worker run
// mid-attempt, as a member with a stale view of the topology does: the
// owner's attempt is fenced out at its next commit, and nothing else
// would ever wake the run again (it is not parked: no child's completion
// is coming for it).
func TestForeignLeaseTakenBackBySweep(t *testing.T) {
	gate := make(chan struct{})
	calls := &atomic.Int64{}
	nc, js, nodes := startNodes(t, worker{gate: gate, calls: calls})
	roots := startRoots(t, nodes[0], 1)
	eventually(t, "both workers waiting in their model", func() bool { return calls.Load() >= 2 })
	ctx := context.Background()
	rep, err := clustertest.Check(ctx, js, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	var w *clustertest.Run
	for id, r := range rep.Runs {
		if id != roots[0].run && len(r.Leases) > 0 {
			w = r
			break
		}
	}
	if w == nil {
		t.Fatal("no worker run with a lease")
	}
	holder := w.Leases[len(w.Leases)-1].Holder
	var other string
	for _, n := range nodes {
		if id := n.MemberID(); id != holder {
			other = id
			break
		}
	}
	s, err := cjs.New(ctx, nc, cjs.Config{Holder: other})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, w.SessionID, w.RunID); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitRoots(t, nodes[0], roots)
	checkLog(t, js, 3)
}

// The provider tells the node when its membership is stale and when it
// was expelled: the node looks for these by type assertion, so a renamed
// method would silently stop working without these lines.
var (
	_ actors.Membership = (*cluster.Provider)(nil)
	_ actors.Expeller   = (*cluster.Provider)(nil)
)
