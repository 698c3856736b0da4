package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// deployOf is one deploy of the planner and its worker: each agent's
// instructions carry the deploy's tag, so every model request says which
// definition it was made under.
func deployOf(tag string) []actors.Agent {
	limits := runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}
	return []actors.Agent{
		{Definition: runtime.AgentDefinition{Slug: "planner", Instructions: "Plan, " + tag + ".", OutputSchema: json.RawMessage(outSchema), Subagents: []string{"worker"}},
			Limits: limits, Budget: runtime.Budget{Steps: 50}},
		{Definition: runtime.AgentDefinition{Slug: "worker", Instructions: "Work, " + tag + ".", InputSchema: json.RawMessage(childSchema), OutputSchema: json.RawMessage(outSchema)},
			Limits: limits},
	}
}

// seen records every model request: the run's first message (a root's
// task, a child's input) and the system prompt it was sent with.
type seen struct {
	mu   sync.Mutex
	reqs []seenRequest
}

type seenRequest struct{ slug, first, system string }

func (s *seen) add(slug string, req model.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, seenRequest{slug: slug, first: req.Messages[0].Text(), system: req.System})
}

func (s *seen) all() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenRequest(nil), s.reqs...)
}

// deployModel is an agent's model on one deploy: it records each request,
// holds (until its context ends) the requests whose run hold names, and
// otherwise answers as next does.
type deployModel struct {
	slug    string
	seen    *seen
	hold    func(first string) bool
	entered chan string
	next    model.Model
}

func (m deployModel) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	m.seen.add(m.slug, req)
	first := req.Messages[0].Text()
	if m.hold != nil && m.hold(first) {
		m.entered <- m.slug + " " + first
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return m.next.Generate(ctx, req)
}

func spawnWaitComplete() *model.Scripted {
	return &model.Scripted{NoRecord: true, Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"done"}}`)),
	}}
}

func startDeploy(t *testing.T, nc *nats.Conn, tag string, planner, worker deployModel, opts ...func(*actors.Config)) *actors.Node {
	t.Helper()
	cfg := actors.Config{
		Conn: nc, Agents: deployOf(tag),
		Model: func(a actors.Agent) (model.Model, error) {
			if a.Definition.Slug == "planner" {
				return planner, nil
			}
			return worker, nil
		},
		Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{},
		IdleTimeout: 2 * time.Second, Logger: testLogger(t), Store: cjs.Config{},
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A deploy that edits an agent's instructions does not fail the runs in
// flight: a run waiting at its model, and one parked on a child waiting at
// its own, resume after the restart under the definitions they were
// admitted under (their checkpoints' contract hash matches, C9), children
// spawned after the deploy included; a run started after it takes the new
// ones. Before runs were pinned, each resumed run failed with
// "checkpoint contract mismatch".
func TestRunsKeepTheirDefinitionAcrossADeploy(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	before, after := &seen{}, &seen{}
	entered := make(chan string, 8)
	holdRoots := func(first string) bool { return first != "park" }
	n1 := startDeploy(t, nc, "v1",
		deployModel{slug: "planner", seen: before, hold: holdRoots, entered: entered, next: spawnWaitComplete()},
		deployModel{slug: "worker", seen: before, hold: func(string) bool { return true }, entered: entered})
	type started struct{ sess, run string }
	runs := map[string]started{}
	for _, msg := range []string{"wait one", "wait two", "park"} {
		sess, run, err := n1.Run(context.Background(), "planner", msg)
		if err != nil {
			t.Fatal(err)
		}
		runs[msg] = started{sess, run}
	}
	// Two roots wait at their model; the third spawned its worker and
	// parked, the worker waiting at its model.
	want := map[string]bool{"planner wait one": true, "planner wait two": true, `worker {"n":1}`: true}
	for len(want) > 0 {
		select {
		case e := <-entered:
			delete(want, e)
		case <-time.After(time.Minute):
			t.Fatalf("still not at their model: %v", want)
		}
	}
	cut, cancel := context.WithCancel(context.Background())
	cancel() // the deploy's stop: the model requests in flight are cut
	_ = n1.Close(cut)

	n2 := startDeploy(t, nc, "v2",
		deployModel{slug: "planner", seen: after, next: spawnWaitComplete()},
		deployModel{slug: "worker", seen: after, next: childModel{}})
	defer closeNode(t, n2)
	for msg, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, _, err := n2.Result(ctx, r.sess, r.run)
		cancel()
		if st != runtime.StatusCompleted {
			t.Fatalf("run %q after the deploy: %s, %v; want completed under its first definition", msg, st, err)
		}
	}
	sess, run, err := n2.Run(context.Background(), "planner", "new")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n2, sess, run)

	// Every request of the runs admitted before the deploy, children
	// included, was made under v1's instructions; the new run's, and its
	// child's, under v2's. A worker's input does not name its root (each
	// root's child has n 1): the new root has one child, the old ones
	// three.
	var newRoot, oldRoot, newChild, oldChild int
	for _, r := range after.all() {
		switch {
		case r.slug == "planner" && r.first == "new":
			newRoot++
			if r.system != "Plan, v2." && !strings.HasPrefix(r.system, "Plan, v2.") {
				t.Errorf("the new run's request sent with system %q; want v2's instructions", r.system)
			}
		case r.slug == "planner":
			oldRoot++
			if !strings.HasPrefix(r.system, "Plan, v1.") {
				t.Errorf("run %q's request after the deploy sent with system %q; want v1's instructions, as admitted", r.first, r.system)
			}
		case strings.HasPrefix(r.system, "Work, v2."):
			newChild++
		case strings.HasPrefix(r.system, "Work, v1."):
			oldChild++
		default:
			t.Errorf("a worker's request sent with system %q", r.system)
		}
	}
	if newRoot == 0 || oldRoot == 0 || newChild == 0 || oldChild < 3 {
		t.Errorf("requests after the deploy: roots %d new, %d old; workers %d under v2, %d under v1; want some of each, and a v1 request from each of 3 old workers",
			newRoot, oldRoot, newChild, oldChild)
	}

	// The log names each run's version, one rooted at the run's own agent:
	// the old runs one, their children another (the worker's closure
	// under v1), the new run and its child two more.
	s, err := cjs.New(context.Background(), nc, cjs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defOf := func(sess, run string) string {
		t.Helper()
		rec, err := s.ReadRun(context.Background(), sess, run)
		if err != nil || rec == nil {
			t.Fatalf("record of %s: %v, %v", run, rec, err)
		}
		if rec.Definition == "" {
			t.Fatalf("the record of %s names no definition version", run)
		}
		return rec.Definition
	}
	old := defOf(runs["park"].sess, runs["park"].run)
	cs, cr := actors.ChildIDs(runs["park"].run, "a")
	oldWorker := defOf(cs, cr)
	for msg, r := range runs {
		if got := defOf(r.sess, r.run); got != old {
			t.Errorf("run %q: version %s, want %s (admitted under the same deploy)", msg, got, old)
		}
		cs, cr := actors.ChildIDs(r.run, "a")
		if got := defOf(cs, cr); got != oldWorker {
			t.Errorf("the child of %q: version %s, want %s (its parent's worker)", msg, got, oldWorker)
		}
	}
	ns, nr := actors.ChildIDs(run, "a")
	seenIDs := map[string]bool{old: true, oldWorker: true, defOf(sess, run): true, defOf(ns, nr): true}
	if len(seenIDs) != 4 {
		t.Errorf("versions: old run %s, its child %s, new run %s, its child %s; want four", old, oldWorker, defOf(sess, run), defOf(ns, nr))
	}
}

// An operator moves runs admitted under v1 to v2 after a deploy: a run
// waiting at its model takes v2 at once on its next attempt (its
// checkpoint committed again under v2's contract), a run parked on a
// child in flight finishes the wait under v1 and takes v2 at its next
// model boundary. Its child, not upgraded, stays on v1. What cannot be
// moved is refused with its reason and nothing written.
func TestUpgradeMovesRunsAtTheirModelBoundary(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	entered := make(chan string, 16)
	holdAll := func(string) bool { return true }
	await := func(want ...string) {
		t.Helper()
		left := map[string]bool{}
		for _, w := range want {
			left[w] = true
		}
		for len(left) > 0 {
			select {
			case e := <-entered:
				delete(left, e)
			case <-time.After(time.Minute):
				t.Fatalf("still not at their model: %v", left)
			}
		}
	}
	cut := func(n *actors.Node) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = n.Close(ctx)
	}
	// v1: one root waits at its model, another spawns its worker and
	// parks, the worker waiting at its model.
	n1 := startDeploy(t, nc, "v1",
		deployModel{slug: "planner", seen: &seen{}, hold: func(first string) bool { return first != "park" }, entered: entered, next: spawnWaitComplete()},
		deployModel{slug: "worker", seen: &seen{}, hold: holdAll, entered: entered})
	ws, wr, err := n1.Run(context.Background(), "planner", "wait")
	if err != nil {
		t.Fatal(err)
	}
	ps, pr, err := n1.Run(context.Background(), "planner", "park")
	if err != nil {
		t.Fatal(err)
	}
	await("planner wait", `worker {"n":1}`)
	cut(n1)

	// v2 deployed: the runs resume under v1 and are held where they were.
	n2 := startDeploy(t, nc, "v2",
		deployModel{slug: "planner", seen: &seen{}, hold: func(first string) bool { return first != "park" }, entered: entered, next: spawnWaitComplete()},
		deployModel{slug: "worker", seen: &seen{}, hold: holdAll, entered: entered})
	await("planner wait", `worker {"n":1}`)
	ctx := context.Background()
	dry, err := n2.Upgrade(ctx, ws, wr, true)
	if err != nil || dry.From == "" || dry.To == "" || dry.From == dry.To {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	for _, r := range []struct{ sess, run string }{{ws, wr}, {ps, pr}} {
		if res, err := n2.Upgrade(ctx, r.sess, r.run, false); err != nil || res.From != dry.From || res.To != dry.To {
			t.Fatalf("upgrade %s: %+v, %v; want %s -> %s", r.run, res, err, dry.From, dry.To)
		}
		// A second one is refused while the first is pending.
		if _, err := n2.Upgrade(ctx, r.sess, r.run, false); !errors.Is(err, actors.ErrCannotUpgrade) || !strings.Contains(err.Error(), "pending") {
			t.Fatalf("a second upgrade of %s: %v; want refused, one pending", r.run, err)
		}
	}
	cs, cr := actors.ChildIDs(pr, "a")
	// The worker could move too (its own definition changed), but is not
	// moved: a dry run says so and writes nothing.
	if res, err := n2.Upgrade(ctx, cs, cr, true); err != nil || res.From == res.To || res.Agent != "worker" {
		t.Fatalf("a dry run of the child's upgrade: %+v, %v", res, err)
	}
	if _, err := n2.Upgrade(ctx, "s-none", "r-none", false); !errors.Is(err, actors.ErrNotFound) {
		t.Fatalf("an unknown run: %v; want ErrNotFound", err)
	}
	cut(n2)

	// v2 again, nothing held: the waiting root takes v2 at once; the
	// parked one's worker finishes under v1, then the parent takes v2
	// before its next model request.
	after := &seen{}
	var mu sync.Mutex
	outcomes := map[string][]string{}
	n3 := startDeploy(t, nc, "v2",
		deployModel{slug: "planner", seen: after, next: spawnWaitComplete()},
		deployModel{slug: "worker", seen: after, next: childModel{}},
		func(c *actors.Config) {
			c.OnAttempt = func(a actors.AttemptEnded) {
				mu.Lock()
				defer mu.Unlock()
				outcomes[a.Run.RunID] = append(outcomes[a.Run.RunID], a.Reason+":"+a.Outcome)
			}
		})
	defer closeNode(t, n3)
	for _, r := range []struct{ sess, run string }{{ws, wr}, {ps, pr}} {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		st, _, err := n3.Result(rctx, r.sess, r.run)
		cancel()
		if st != runtime.StatusCompleted {
			t.Fatalf("run %s after its upgrade: %s, %v; want completed", r.run, st, err)
		}
	}
	var rootV2, rootV1, workerV1 int
	for _, r := range after.all() {
		switch {
		case r.slug == "planner" && strings.HasPrefix(r.system, "Plan, v2."):
			rootV2++
		case r.slug == "planner":
			rootV1++
		case strings.HasPrefix(r.system, "Work, v1."):
			workerV1++
		}
	}
	if rootV1 != 0 || rootV2 == 0 {
		t.Errorf("after the upgrade the roots asked %d times under v1, %d under v2; want v2 only", rootV1, rootV2)
	}
	// The parked root stopped once at its model boundary, and its next
	// attempt took the upgrade; the waiting one took it on its first.
	mu.Lock()
	if got := strings.Join(outcomes[pr], " "); !strings.Contains(got, ":upgrading upgraded:completed") {
		t.Errorf("the parked root's attempts: %s; want one that stops upgrading, then one that completes", got)
	}
	if got := strings.Join(outcomes[wr], " "); strings.Contains(got, "upgrading") {
		t.Errorf("the waiting root's attempts: %s; want none stopping: it took the upgrade at its start", got)
	}
	mu.Unlock()
	if workerV1 == 0 {
		t.Error("the parked root's worker, not upgraded, did not finish under v1")
	}
	if _, err := n3.Upgrade(ctx, ws, wr, false); !errors.Is(err, actors.ErrCannotUpgrade) || !strings.Contains(err.Error(), "ended") {
		t.Errorf("upgrading an ended run: %v; want refused as ended", err)
	}
	// The log holds each upgrade, with both versions.
	s, err := cjs.New(ctx, nc, cjs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ sess, run string }{{ws, wr}, {ps, pr}} {
		m, err := s.Last(ctx, events.RunUpgradedSubject(r.sess, r.run))
		if err != nil || m == nil {
			t.Fatalf("the upgrade of %s in the log: %v, %v", r.run, m, err)
		}
		e, err := events.Decode(m.Data)
		var u events.Upgrade
		if err == nil {
			err = e.Payload(&u)
		}
		if err != nil || u.From != dry.From || u.To != dry.To || e.Version != events.UpgradeVersion {
			t.Errorf("the upgrade of %s: %+v (v%d), %v", r.run, u, e.Version, err)
		}
	}
}

// An upgrade the run cannot take is refused, naming why, with nothing
// written: the new definition no longer spawns a child it has in flight,
// or has another output schema for it.
func TestUpgradeRefusesWhatTheRunCannotTake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(agents []actors.Agent) []actors.Agent
		why    string
	}{
		{"the child agent is no longer a subagent", func(agents []actors.Agent) []actors.Agent {
			agents[0].Definition.Subagents = nil
			return agents
		}, `no longer spawns "worker"`},
		{"the child's output schema changed", func(agents []actors.Agent) []actors.Agent {
			agents[1].Definition.OutputSchema = json.RawMessage(`{"type":"object","required":["answer","score"],"properties":{"answer":{"type":"string"},"score":{"type":"integer"}}}`)
			return agents
		}, "output schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := natstest.Connect(t, natstest.Server(t))
			entered := make(chan string, 8)
			worker := deployModel{slug: "worker", seen: &seen{}, hold: func(string) bool { return true }, entered: entered}
			n1 := startDeploy(t, nc, "v1", deployModel{slug: "planner", seen: &seen{}, next: spawnWaitComplete()}, worker)
			sess, run, err := n1.Run(context.Background(), "planner", "park")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-entered:
			case <-time.After(time.Minute):
				t.Fatal("the worker never asked its model")
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = n1.Close(ctx)
			n2 := startDeploy(t, nc, "v2", deployModel{slug: "planner", seen: &seen{}, next: spawnWaitComplete()}, worker, func(c *actors.Config) {
				c.Agents = tc.change(c.Agents)
			})
			defer func() { // its worker waits at the model: no drain to wait for
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				_ = n2.Close(ctx)
			}()
			for _, dry := range []bool{true, false} {
				res, err := n2.Upgrade(context.Background(), sess, run, dry)
				if !errors.Is(err, actors.ErrCannotUpgrade) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(res.Refused, tc.why) {
					t.Fatalf("upgrade (dry run %v): %+v, %v; want refused: %s", dry, res, err, tc.why)
				}
			}
			s, err := cjs.New(context.Background(), nc, cjs.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := s.Last(context.Background(), events.RunUpgradedSubject(sess, run)); err != nil || m != nil {
				t.Fatalf("a refused upgrade wrote %v (%v)", m, err)
			}
		})
	}
}

// Retention's side of pinning: a version no kept run names, current on
// no member and older than the grace is removed; one a kept run names is
// kept, with the closures of the children its runs may still spawn; the
// node's current versions are kept and written again once old.
func TestPruneVersionsKeepsWhatRunsNeed(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	n1 := startDeploy(t, nc, "v1", deployModel{slug: "planner", seen: &seen{}, next: spawnWaitComplete()}, deployModel{slug: "worker", seen: &seen{}, next: childModel{}})
	sess, run, err := n1.Run(context.Background(), "planner", "one")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n1, sess, run)
	closeNode(t, n1)
	later := time.Now().Add(48 * time.Hour)
	n2 := startDeploy(t, nc, "v2", deployModel{slug: "planner", seen: &seen{}, next: spawnWaitComplete()}, deployModel{slug: "worker", seen: &seen{}, next: childModel{}},
		func(c *actors.Config) { c.Now = func() time.Time { return later } })
	ctx := context.Background()
	s, err := cjs.New(ctx, nc, cjs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.ReadRun(ctx, sess, run)
	if err != nil || rec == nil {
		t.Fatal(rec, err)
	}
	cs, cr := actors.ChildIDs(run, "a")
	child, err := s.ReadRun(ctx, cs, cr)
	if err != nil || child == nil {
		t.Fatal(child, err)
	}
	// The run is kept: its version, and its worker's closure in it, stay.
	removed, err := n2.PruneVersions(ctx, map[string]bool{rec.Definition: true}, 24*time.Hour)
	if err != nil || len(removed) != 0 {
		t.Fatalf("with the v1 run kept: removed %v, %v; want none", removed, err)
	}
	for _, id := range []string{rec.Definition, child.Definition} {
		if _, err := n2.Version(ctx, id); err != nil {
			t.Fatalf("version %s after a prune that keeps it: %v", id, err)
		}
	}
	// Purged: the v1 versions go; v2's, current, stay.
	removed, err = n2.PruneVersions(ctx, map[string]bool{}, 24*time.Hour)
	if err != nil || !slices.Contains(removed, rec.Definition) || !slices.Contains(removed, child.Definition) {
		t.Fatalf("with no run kept: removed %v, %v; want v1's planner and worker", removed, err)
	}
	// Gone from the bucket and from the node's memory.
	if _, err := n2.Version(ctx, rec.Definition); !errors.Is(err, actors.ErrUnknownVersion) {
		t.Fatalf("a removed version: %v; want ErrUnknownVersion", err)
	}
	for _, d := range n2.Deployed() {
		if _, err := n2.Version(ctx, d.Version); err != nil {
			t.Fatalf("the current version of %s after a prune: %v", d.Slug, err)
		}
	}
	// v1 deployed again (a rollback): its versions are stored again over
	// what the prune left, and its runs run, children included.
	closeNode(t, n2)
	n3 := startDeploy(t, nc, "v1", deployModel{slug: "planner", seen: &seen{}, next: spawnWaitComplete()}, deployModel{slug: "worker", seen: &seen{}, next: childModel{}})
	defer closeNode(t, n3)
	sess, run, err = n3.Run(ctx, "planner", "two")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n3, sess, run)
	if again, err := s.ReadRun(ctx, sess, run); err != nil || again.Definition != rec.Definition {
		t.Fatalf("the rollback's run: %+v, %v; want version %s again", again, err, rec.Definition)
	}
	// In the bucket, where another member would load it from (not only in
	// this node's memory).
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "cairn_definitions")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, rec.Definition); err != nil {
		t.Fatalf("the rollback's version in the bucket: %v", err)
	}
}
