package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/runtime/session"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

const (
	outSchema   = `{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}},"additionalProperties":false}`
	childSchema = `{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}},"additionalProperties":false}`
)

// gate lets a test decide when each child's model answers.
type gate struct {
	mu   sync.Mutex
	open map[string]chan struct{}
}

func (g *gate) ch(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = map[string]chan struct{}{}
	}
	if g.open[key] == nil {
		g.open[key] = make(chan struct{})
	}
	return g.open[key]
}

func (g *gate) release(key string) { close(g.ch(key)) }

// childModel completes with the child's input; when a gate is set it waits
// for the input's n to be released first.
type childModel struct {
	g     *gate
	calls *atomic.Int64
}

func (m childModel) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	input := req.Messages[0].Text()
	if m.calls != nil {
		m.calls.Add(1)
	}
	if m.g != nil {
		select {
		case <-m.g.ch(input):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	last := req.Messages[len(req.Messages)-1].Text()
	out, _ := json.Marshal(map[string]any{"type": "output", "output": map[string]string{"answer": "child " + input + " / " + last}})
	// Call IDs are unique in a session: a continuation's window holds the
	// earlier run's calls.
	r := model.Reply(model.Call(fmt.Sprintf("done-%d", len(req.Messages)), "complete", string(out)))
	return &r, nil
}

type harness struct {
	nc     *nats.Conn
	parent model.Model
	child  model.Model
	sink   func(run events.Run, ev runtime.SinkEvent)
	// budget of the planner's root runs; zero means 50 steps.
	budget runtime.Budget
	// idle passivates actors; zero means 2s.
	idle time.Duration
	// gc is the store's group commit (the ledger and the active set
	// write through it too); zero is adaptive.
	gc cjs.GroupCommit
	// log, when set, receives the node's log records (and testLogger's
	// are not written).
	log slog.Handler
	// clock runs the node's timers; nil is the wall clock.
	clock clock.Clock
	// waits is the clock of the node's transport waits; nil is the wall
	// clock.
	waits clock.Clock
	// hooks of the node.
	hooks actors.Hooks
	// maxRetries of a failed attempt; zero is the node's default.
	maxRetries int
	// schemaLevel pins the schema version the node writes; zero: none.
	schemaLevel int
	// activeKV makes the node write the earlier builds' active set too.
	activeKV bool
	node     *actors.Node
}

// start starts a node with a planner (subagent: worker) on the harness's
// models.
func (h *harness) start(t testing.TB) *actors.Node {
	t.Helper()
	budget, idle := h.budget, h.idle
	if budget.IsZero() {
		budget = runtime.Budget{Steps: 50}
	}
	if idle == 0 {
		idle = 2 * time.Second
	}
	logger := testLogger(t)
	if h.log != nil {
		logger = slog.New(h.log)
	}
	cfg := actors.Config{
		Conn: h.nc,
		Agents: []actors.Agent{
			{Definition: runtime.AgentDefinition{Slug: "planner", Instructions: "Plan.", OutputSchema: json.RawMessage(outSchema), Subagents: []string{"worker"}},
				Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}, Budget: budget},
			{Definition: runtime.AgentDefinition{Slug: "worker", Instructions: "Work.", InputSchema: json.RawMessage(childSchema), OutputSchema: json.RawMessage(outSchema)},
				Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}},
		},
		Model: func(a actors.Agent) (model.Model, error) {
			if a.Definition.Slug == "planner" {
				return h.parent, nil
			}
			return h.child, nil
		},
		Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{},
		IdleTimeout: idle, Logger: logger, Sink: h.sink, Store: cjs.Config{GroupCommit: h.gc},
		Clock: h.clock, Waits: h.waits, Hooks: h.hooks, MaxRetries: h.maxRetries, SchemaLevel: h.schemaLevel,
	}
	if h.activeKV {
		cfg = actors.WithActiveKV(cfg)
	}
	n, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.node = n
	return n
}

func threeChildren() *model.Scripted {
	return &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`), model.Call("b", "spawn_worker", `{"n":2}`), model.Call("c", "spawn_worker", `{"n":3}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a","b","c"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"all three"}}`)),
	}}
}

func result(t *testing.T, n *actors.Node, sess, run string) *runtime.Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, reply, err := n.Result(ctx, sess, run)
	if err != nil || st != runtime.StatusCompleted {
		t.Fatalf("run %s: %s, %v", run, st, err)
	}
	return reply
}

func TestParentWithThreeChildren(t *testing.T) {
	h := &harness{nc: natstest.Connect(t, natstest.Server(t)), parent: threeChildren(), child: childModel{}}
	n := h.start(t)
	defer closeNode(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "Do three things.")
	if err != nil {
		t.Fatal(err)
	}
	reply := result(t, n, sess, run)
	if string(reply.Output) != `{"answer":"all three"}` {
		t.Fatalf("reply = %s", reply.Output)
	}
}

// C28, D3: children finish in every order, some while the parent is still
// inside its attempt, others after it parked; the parent completes exactly
// once with all three results.
func TestChildrenFinishInEveryOrder(t *testing.T) {
	g := &gate{}
	h := &harness{nc: natstest.Connect(t, natstest.Server(t)), parent: threeChildren(), child: childModel{g: g}}
	n := h.start(t)
	defer closeNode(t, n)
	orders := [][]string{{"1", "2", "3"}, {"1", "3", "2"}, {"2", "1", "3"}, {"2", "3", "1"}, {"3", "1", "2"}, {"3", "2", "1"}}
	for i, order := range orders {
		// Each root gets its own children; the gate keys on the child input.
		*g = gate{}
		sess, run, err := n.Run(context.Background(), "planner", fmt.Sprintf("Round %d.", i))
		if err != nil {
			t.Fatal(err)
		}
		calls := map[string]string{"1": "a", "2": "b", "3": "c"}
		for _, k := range order {
			g.release(`{"n":` + k + `}`)
			cs, cr := actors.ChildIDs(run, calls[k])
			result(t, n, cs, cr)
		}
		reply := result(t, n, sess, run)
		if string(reply.Output) != `{"answer":"all three"}` {
			t.Fatalf("order %v: reply %s", order, reply.Output)
		}
	}
}

// history reads a finished run's session transcript.
func history(t *testing.T, nc *nats.Conn, sess, run string) []model.Message {
	t.Helper()
	s, err := cjs.New(context.Background(), nc, cjs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(context.Background(), sess, run)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := h.(session.Auditor).History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// waitResult decodes the wait_calls result of a transcript.
func waitResult(t *testing.T, msgs []model.Message, callID string) runtime.WaitResult {
	t.Helper()
	r := runtimetest.ToolResult(msgs, callID)
	if r == nil {
		t.Fatalf("no result for %s in %s", callID, runtimetest.Dump(msgs))
	}
	var wr runtime.WaitResult
	if err := json.Unmarshal([]byte(r.Content), &wr); err != nil {
		t.Fatalf("wait result %q: %v", r.Content, err)
	}
	return wr
}

func completedAll(t *testing.T, msgs []model.Message) {
	t.Helper()
	wr := waitResult(t, msgs, "w")
	if wr.TimedOut || len(wr.Calls) != 3 {
		t.Fatalf("wait result %+v", wr)
	}
	for _, c := range wr.Calls {
		if c.Status != runtime.StatusCompleted || c.Reply == nil {
			t.Fatalf("child %s: %s %v", c.CallID, c.Status, c.Reply)
		}
	}
	completes := 0
	for _, m := range msgs {
		for _, c := range m.ToolCalls() {
			if c.Name == "complete" {
				completes++
			}
		}
	}
	if completes != 1 {
		t.Fatalf("%d complete calls in the parent's transcript", completes)
	}
}

// The parent's node stops mid-wait; a new node on the same log wakes it
// through the children's completions; nothing is appended twice (the
// store refuses a message ID twice).
func TestRestartMidWait(t *testing.T) {
	g := &gate{}
	nc := natstest.Connect(t, natstest.Server(t))
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{g: g}}
	n1 := h.start(t)
	sess, run, err := n1.Run(context.Background(), "planner", "Survive a restart.")
	if err != nil {
		t.Fatal(err)
	}
	g.release(`{"n":1}`)
	cs, cr := actors.ChildIDs(run, "a")
	result(t, n1, cs, cr)
	closeNode(t, n1)

	n2 := h.start(t)
	defer closeNode(t, n2)
	g.release(`{"n":2}`)
	g.release(`{"n":3}`)
	result(t, n2, sess, run)
	completedAll(t, history(t, nc, sess, run))
}

// C28: a wait's deadline fires after a restart, returns the state and
// cancels nothing; the parent then cancels its owned children (C27). Both
// nodes' clocks start at the same time and move only when the test moves
// the second past the wait's deadline, once it armed it.
func TestWaitTimeoutAfterRestartThenCancel(t *testing.T) {
	g := &gate{} // never released
	nc := natstest.Connect(t, natstest.Server(t))
	parent := &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a"],"timeout_seconds":2}`)),
		model.Reply(model.Call("x", "cancel_calls", `{"ids":["a"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"gave up"}}`)),
	}}
	start := time.Now()
	h := &harness{nc: nc, parent: parent, child: childModel{g: g}, clock: clock.NewFake(start)}
	n1 := h.start(t)
	sess, run, err := n1.Run(context.Background(), "planner", "Time out.")
	if err != nil {
		t.Fatal(err)
	}
	closeNode(t, n1) // before or after the wait registered: either way durable

	clk := clock.NewFake(start)
	h.clock = clk
	n2 := h.start(t)
	defer closeNode(t, n2)
	advanceOnceArmed(t, clk, 3*time.Second)
	result(t, n2, sess, run)
	msgs := history(t, nc, sess, run)
	wr := waitResult(t, msgs, "w")
	if !wr.TimedOut || wr.Calls[0].Status != runtime.StatusRunning {
		t.Fatalf("wait = %+v: want a timeout that cancelled nothing", wr)
	}
	var ci []runtime.CancelInfo
	if err := json.Unmarshal([]byte(runtimetest.ToolResult(msgs, "x").Content), &ci); err != nil || !ci[0].Cancelled {
		t.Fatalf("cancel = %s", runtimetest.ToolResult(msgs, "x").Content)
	}
	cs, cr := actors.ChildIDs(run, "a")
	if st, _, _ := n2.Result(context.Background(), cs, cr); st != runtime.StatusCancelled {
		t.Fatalf("child status %s", st)
	}
}

// C10, C27: a call ID that is not this run's child is refused.
func TestForeignCallRefused(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	parent := &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("g", "get_calls", `{"ids":["someone-else"]}`), model.Call("x", "cancel_calls", `{"ids":["a"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}
	h := &harness{nc: nc, parent: parent, child: childModel{}}
	_, sess, run := h.finish(t, "Poke.")
	msgs := history(t, nc, sess, run)
	for _, id := range []string{"g", "x"} {
		if r := runtimetest.ToolResult(msgs, id); !r.IsError || !strings.Contains(r.Content, "is not a child of this run") {
			t.Fatalf("%s = %+v", id, r)
		}
	}
}

// C24, C33, C35: children draw on the root's budget; exhausting it fails
// the run at the gate with a budget error, before any further model call.
// In every commit mode: with batch forced, the parent's and children's
// reservations (compare-and-set on one budget entry) share atomic batches,
// and none is lost or counted twice.
func TestBudgetAcrossParentAndChildren(t *testing.T) {
	for _, gc := range []cjs.GroupCommit{{Mode: cjs.CommitSingle}, {Mode: cjs.CommitBatch}, {}} {
		t.Run(string(gc.Mode), func(t *testing.T) { budgetAcrossParentAndChildren(t, gc) })
	}
}

func budgetAcrossParentAndChildren(t *testing.T, gc cjs.GroupCommit) {
	nc := natstest.Connect(t, natstest.Server(t))
	var childCalls atomic.Int64
	parent := threeChildren()
	h := &harness{nc: nc, parent: parent, child: childModel{calls: &childCalls}, budget: runtime.Budget{Steps: 4}, gc: gc}
	n, run := runOutOfBudget(t, h, "Too much.", "budget exhausted")
	steps, _, _, err := n.Usage(context.Background(), run)
	if err != nil || steps != 4 {
		t.Fatalf("steps used = %d (%v), want the 4 of the budget", steps, err)
	}
	// Every reservation was followed by one model request and no request
	// went without one: parent and children together made exactly 4.
	if got := int64(len(parent.Requests())) + childCalls.Load(); got != 4 {
		t.Fatalf("%d model requests for 4 reserved steps", got)
	}
}

// finish starts h's node (closed when the test ends) and runs the planner
// on message to its completion.
func (h *harness) finish(t *testing.T, message string) (n *actors.Node, sess, run string) {
	t.Helper()
	n = h.start(t)
	t.Cleanup(func() { closeNode(t, n) })
	sess, run, err := n.Run(context.Background(), "planner", message)
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess, run)
	return n, sess, run
}

// runOutOfBudget starts h's node (closed when the test ends), runs the
// planner on message and checks that the root fails on its budget, with an
// error that says why.
func runOutOfBudget(t *testing.T, h *harness, message, why string) (*actors.Node, string) {
	t.Helper()
	n := h.start(t)
	t.Cleanup(func() { closeNode(t, n) })
	sess, run, err := n.Run(context.Background(), "planner", message)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, _, err := n.Result(ctx, sess, run)
	if st != runtime.StatusFailed || !strings.Contains(fmt.Sprint(err), why) {
		t.Fatalf("root = %s, %v; want failed on its budget (%s)", st, err, why)
	}
	return n, run
}

func testLogger(testing.TB) *slog.Logger {
	if os.Getenv("CAIRN_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// parked signals when a run's sink reports that it parked.
type parked struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (p *parked) of(run string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.ch = map[string]chan struct{}{}
	}
	if p.ch[run] == nil {
		p.ch[run] = make(chan struct{})
	}
	return p.ch[run]
}

func (p *parked) sink(rec events.Run, ev runtime.SinkEvent) {
	if ev.Kind == runtime.SinkWaiting {
		ch := p.of(rec.RunID)
		p.mu.Lock()
		select {
		case <-ch:
		default:
			close(ch)
		}
		p.mu.Unlock()
	}
}

func waitParked(t *testing.T, p *parked, run string) {
	t.Helper()
	select {
	case <-p.of(run):
	case <-time.After(60 * time.Second):
		t.Fatalf("run %s never parked", run)
	}
}

// D3: a parked parent with running children holds nothing and reads
// nothing as time passes: its actor passivates, no timer of the node's
// clock is armed for it, and a day passing on that clock fires nothing
// (nothing polls); it wakes when its children report back.
func TestNoPollingWhileParked(t *testing.T) {
	g := &gate{}
	nc := natstest.Connect(t, natstest.Server(t))
	p := &parked{}
	clk := clock.NewFake(time.Now())
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{g: g}, sink: p.sink, clock: clk, idle: 200 * time.Millisecond}
	n := h.start(t)
	defer closeNode(t, n)
	stops := watchStops(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "Wait quietly.")
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, p, run)
	// Passivated: its park was handled to the end (a timer it armed would
	// be armed by now).
	waitEvent(t, stops.of(sess+"."+run), "the parked parent's actor passivates")
	if armed := clk.Armed(); armed != 0 {
		t.Fatalf("%d timers armed for a run parked without a deadline", armed)
	}
	if fired := clk.Advance(24 * time.Hour); fired != 0 {
		t.Fatalf("%d timers fired in a day while the run was parked", fired)
	}
	for _, k := range []string{"1", "2", "3"} {
		g.release(`{"n":` + k + `}`)
	}
	result(t, n, sess, run)
}

// signals closes a channel per key when its event happens (the first time).
type signals struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func (e *signals) of(key string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch == nil {
		e.ch = map[string]chan struct{}{}
	}
	if e.ch[key] == nil {
		e.ch[key] = make(chan struct{})
	}
	return e.ch[key]
}

func (e *signals) happened(key string) {
	ch := e.of(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// watchStops tells when run actors of n stop, by identity (session.run).
func watchStops(t testing.TB, n *actors.Node) *signals {
	e := &signals{}
	t.Cleanup(n.OnActorStopped(e.happened))
	return e
}

func waitEvent(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second): // a last resort: the event is the mechanism
		t.Fatalf("never happened: %s", what)
	}
}

// continuer spawns a child, waits for it, continues its session with a
// follow-up, waits again and completes: the continue needs the child's
// session ID, which only the spawn result tells.
type continuer struct{ calls atomic.Int64 }

func (c *continuer) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	c.calls.Add(1)
	var r model.Response
	step := 0
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant {
			step++
		}
	}
	switch step {
	case 0:
		r = model.Reply(model.Call("a", "spawn_worker", `{"n":7}`))
	case 1:
		r = model.Reply(model.Call("w1", "wait_calls", `{"ids":["a"]}`))
	case 2:
		var info runtime.AgentRunInfo
		if err := json.Unmarshal([]byte(runtimetest.ToolResult(req.Messages, "a").Content), &info); err != nil {
			return nil, err
		}
		r = model.Reply(model.Call("c", "continue_agent", fmt.Sprintf(`{"session_id":%q,"prompt":"and one more thing"}`, info.SessionID)))
	case 3:
		r = model.Reply(model.Call("w", "wait_calls", `{"ids":["c"]}`))
	default:
		r = model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"continued"}}`))
	}
	return &r, nil
}

// C26: Continue starts a new run in a completed child session, sharing the
// session's transcript, on the root's budget.
func TestContinueCompletedChildSession(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	h := &harness{nc: nc, parent: &continuer{}, child: childModel{}, budget: runtime.Budget{Steps: 20}}
	n, sess, run := h.finish(t, "Continue a child.")
	cont := continued(t, history(t, nc, sess, run))
	// The continuation saw the first run's transcript and its own prompt.
	if got := string(cont.Reply.Output); !strings.Contains(got, `{\"n\":7}`) || !strings.Contains(got, "and one more thing") {
		t.Fatalf("continuation reply %s", got)
	}
	steps, _, _, _ := n.Usage(context.Background(), run)
	if steps != 7 { // 5 parent steps + 2 child runs, one budget
		t.Fatalf("root budget used %d steps, want 7", steps)
	}
}

// continued checks, in the transcript of a continuer's run, that its wait
// "w" saw the continuation completed, a run of its own in the session of
// the first child (waited on by "w1"), and returns the continuation.
func continued(t *testing.T, msgs []model.Message) runtime.CallInfo {
	t.Helper()
	wr := waitResult(t, msgs, "w")
	if len(wr.Calls) != 1 || wr.Calls[0].Status != runtime.StatusCompleted {
		t.Fatalf("wait on the continuation = %+v", wr)
	}
	first := waitResult(t, msgs, "w1").Calls[0]
	if wr.Calls[0].SessionID != first.SessionID || wr.Calls[0].RunID == first.RunID {
		t.Fatalf("continuation ran in session %s run %s; the first in %s run %s", wr.Calls[0].SessionID, wr.Calls[0].RunID, first.SessionID, first.RunID)
	}
	return wr.Calls[0]
}

// flaky fails its first request after the reservation was made: a crash
// between BeforeModel and the provider request.
type flaky struct {
	inner model.Model
	n     atomic.Int64
}

func (f *flaky) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	if f.n.Add(1) == 1 {
		return nil, fmt.Errorf("connection reset before the request was sent")
	}
	return f.inner.Generate(ctx, req)
}

// C35: a request lost after its reservation costs a step; the retry
// reserves another, and with the budget spent the run stops at the gate
// without calling the model.
//
// At both places a root run with no subagents keeps its budget: its log
// (this build's cluster: the step reserved by revision 1's commit) and
// the budgets bucket (a cluster at schema level 3).
func TestCrashAfterReservationCostsAStep(t *testing.T) {
	for _, level := range []int{0, 3} {
		t.Run(fmt.Sprintf("level=%d", level), func(t *testing.T) {
			nc := natstest.Connect(t, natstest.Server(t))
			m := &flaky{inner: &model.Scripted{Steps: []model.Response{
				model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"late"}}`)),
			}}}
			n, err := actors.Start(context.Background(), actors.Config{
				Conn: nc, SchemaLevel: level,
				Agents: []actors.Agent{{Definition: runtime.AgentDefinition{Slug: "solo", Instructions: "Answer.", OutputSchema: json.RawMessage(outSchema)},
					Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}, Budget: runtime.Budget{Steps: 1}}},
				Model:   func(actors.Agent) (model.Model, error) { return m, nil },
				Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{}, Logger: testLogger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer closeNode(t, n)
			sess, run, err := n.Run(context.Background(), "solo", "One step only.")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, _, err := n.Result(ctx, sess, run)
			if st != runtime.StatusFailed || !strings.Contains(fmt.Sprint(err), "budget exhausted") {
				t.Fatalf("= %s, %v; want a budget failure", st, err)
			}
			if m.n.Load() != 1 {
				t.Fatalf("the model was called %d times; the retry must stop at the gate", m.n.Load())
			}
			if steps, _, _, err := n.Usage(ctx, run); err != nil || steps != 1 {
				t.Fatalf("steps used %d (%v), want 1", steps, err)
			}
			checkBudgetPlace(t, nc, level == 0, 0) // the gate refused with no write
		})
	}
}

// checkBudgetPlace checks where a node kept the budget of its root runs
// with no subagents: in their commits (schema version 4, and sideWrites
// writes to the budgets bucket: what no commit carried), or, at schema
// level 3, in the bucket (no event of version 4).
func checkBudgetPlace(t *testing.T, nc *nats.Conn, inLog bool, sideWrites uint64) {
	t.Helper()
	writes := budgetWrites(t, nc)
	newest := newestVersion(t, nc)
	switch {
	case inLog && (writes != sideWrites || newest != events.LedgerVersion):
		t.Fatalf("%d writes to the budgets bucket, the log's newest event version %d: want the budget in the log (%d, %d)", writes, newest, sideWrites, events.LedgerVersion)
	case !inLog && (writes == 0 || newest >= events.LedgerVersion):
		t.Fatalf("%d writes to the budgets bucket, the log's newest event version %d: want the budget in the bucket", writes, newest)
	}
}

// budgetWrites is the number of writes the budgets bucket has had.
func budgetWrites(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	js, _ := njs.New(nc)
	st, err := js.Stream(context.Background(), "KV_cairn_budgets")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// C34: the root's wall-clock budget ends a run that is parked waiting on a
// child that never finishes: the node wakes it at the deadline and the
// attempt fails on the expired budget. Half an hour's budget (the wait's
// own timeout is an hour), on the node's clock, which the test moves past
// it once the parked run armed it.
func TestWallClockBudgetEndsParkedRun(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	g := &gate{} // never released
	clk := clock.NewFake(time.Now())
	h := &harness{nc: nc, parent: oneChild(), child: childModel{g: g}, budget: runtime.Budget{Timeout: 30 * time.Minute}, clock: clk}
	n := h.start(t)
	defer closeNode(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "Out of time.")
	if err != nil {
		t.Fatal(err)
	}
	advanceOnceArmed(t, clk, 30*time.Minute+time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, _, err := n.Result(ctx, sess, run)
	if st != runtime.StatusFailed || !strings.Contains(fmt.Sprint(err), "wall-clock deadline") {
		t.Fatalf("= %s, %v; want the run failed on its wall-clock budget", st, err)
	}
}

// advanceOnceArmed moves clk by d once a timer is armed on it (the
// node's deadline timer: nothing else of a node alone runs on the clock).
func advanceOnceArmed(t *testing.T, clk *clock.Fake, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a last resort
	defer cancel()
	if err := clk.BlockUntil(ctx, 1); err != nil {
		t.Fatalf("no deadline armed: %v", err)
	}
	clk.Advance(d)
}

// slowFirst delays its model's first answer past the node's idle timeout.
type slowFirst struct {
	model.Model
	delay time.Duration
	once  sync.Once
}

func (s *slowFirst) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	s.once.Do(func() { time.Sleep(s.delay) })
	return s.Model.Generate(ctx, req)
}

// A run whose attempt outlasts the idle timeout (a slow model call) and
// then parks is passivated all the same: protoactor cancels an actor's
// receive timeout when it fires during the attempt, and a run actor that
// did not arm it again stayed in memory for as long as the node ran.
func TestParkedRunPassivatesAfterALongAttempt(t *testing.T) {
	g := &gate{} // the children never finish
	p := &parked{}
	h := &harness{nc: natstest.Connect(t, natstest.Server(t)), parent: &slowFirst{Model: threeChildren(), delay: 1500 * time.Millisecond},
		child: childModel{g: g}, idle: 300 * time.Millisecond, sink: p.sink}
	n := h.start(t)
	defer closeNode(t, n)
	stops := watchStops(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "Park after a slow step.")
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, p, run)
	// The three children are in their model calls (live); the parked
	// parent must go.
	waitEvent(t, stops.of(sess+"."+run), "the parked parent's actor passivates")
	if live := n.LiveRuns(); live != 3 {
		t.Fatalf("%d run actors live once the parent passivated, want the 3 children", live)
	}
}

// onLog calls fn, once, at the first record whose message and err attribute
// contain msg and errText.
type onLog struct {
	msg, errText string
	fn           func()
	once         *sync.Once
}

func (h onLog) Enabled(context.Context, slog.Level) bool { return true }
func (h onLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h onLog) WithGroup(string) slog.Handler            { return h }
func (h onLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, h.msg) {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && strings.Contains(a.Value.String(), h.errText) {
			h.once.Do(h.fn)
		}
		return true
	})
	return nil
}

// refusingContinuer is continuer, with the children bucket made to refuse
// writes when it asks for the continuation.
type refusingContinuer struct {
	continuer
	refuse func()
}

func (c *refusingContinuer) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	r, err := c.continuer.Generate(ctx, req)
	if err == nil && len(r.Message.ToolCalls()) == 1 && r.Message.ToolCalls()[0].Name == "continue_agent" {
		c.refuse()
	}
	return r, err
}

// C26 (and C25): a continue_agent whose first try created the child run
// but failed to record it as this run's child (the children bucket refused
// the write; a crash there is the same) records it on the retry, so the
// parent can wait for it and it completes once.
func TestContinueRetryRecordsTheChild(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	refuse, restore := bucketRefuse(t, nc, "cairn_children")
	var once sync.Once
	restored := make(chan struct{})
	h := &harness{nc: nc, parent: &refusingContinuer{refuse: refuse}, child: childModel{}, budget: runtime.Budget{Steps: 20},
		// The failed attempt's log record restores the bucket before its
		// retry is scheduled.
		log: onLog{msg: "attempt failed", errText: "track child", once: &once, fn: func() { restore(); close(restored) }}}
	_, sess, run := h.finish(t, "Continue a child.")
	select {
	case <-restored:
	default:
		t.Fatal("the children bucket never refused the continuation's record: the test did not test the retry")
	}
	// One continuation run in the child's session, completed once.
	cont := continued(t, history(t, nc, sess, run))
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	done := events.CheckpointSubject(cont.SessionID, cont.RunID, true)
	stream, err := js.Stream(context.Background(), "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), njs.WithSubjectFilter(done))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[done]; got != 1 {
		t.Fatalf("the continuation committed %d completions, want 1", got)
	}
}

// byTask answers with the script named by the run's first message.
type byTask map[string]*model.Scripted

func (m byTask) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	s, ok := m[req.Messages[0].Text()]
	if !ok {
		return nil, fmt.Errorf("no script for %q", req.Messages[0].Text())
	}
	return s.Generate(ctx, req)
}

// C10, C26, C27: a run waits only on its own calls' children and continues
// only its own children's sessions: a wait naming a call it never made,
// and a continue_agent naming another root's child session, are refused.
func TestForeignWaitAndContinueRefused(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	h := &harness{nc: nc, child: childModel{}, parent: byTask{
		"first": {Steps: []model.Response{
			model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
			model.Reply(model.Call("w", "wait_calls", `{"ids":["a"]}`)),
			model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
		}},
	}}
	n := h.start(t)
	defer closeNode(t, n)
	sess1, run1, err := n.Run(context.Background(), "planner", "first")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess1, run1)
	childSess, _ := actors.ChildIDs(run1, "a")
	h.parent.(byTask)["second"] = &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a"]}`),
			model.Call("c", "continue_agent", fmt.Sprintf(`{"session_id":%q,"prompt":"mine now"}`, childSess))),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}
	sess2, run2, err := n.Run(context.Background(), "planner", "second")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess2, run2)
	msgs := history(t, nc, sess2, run2)
	for id, want := range map[string]string{"w": "is not a child of this run", "c": "is not a session of this run's children"} {
		if r := runtimetest.ToolResult(msgs, id); r == nil || !r.IsError || !strings.Contains(r.Content, want) {
			t.Fatalf("%s = %+v, want a refusal (%s)", id, r, want)
		}
	}
	// The refused continuation created no run.
	if kids, err := n.Children(context.Background(), run2); err != nil || len(kids) != 0 {
		t.Fatalf("children of the second run %+v, %v; want none", kids, err)
	}
}

// C24, C33, C34: a token-only budget counts the tokens of the whole tree.
// Every response reports 30 input and 20 output tokens; with 250 allowed,
// the parent's spawn and wait responses and its three children's make
// 250, and the parent's next step stops at the gate without a request.
func TestTokenBudgetCountsDescendants(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	u := model.Usage{InputTokens: 30, OutputTokens: 20}
	parent := threeChildren()
	var childCalls atomic.Int64
	h := &harness{nc: nc, parent: runtimetest.Reporting{Model: parent, Usage: u}, child: runtimetest.Reporting{Model: childModel{calls: &childCalls}, Usage: u}, budget: runtime.Budget{Tokens: 250}}
	n, run := runOutOfBudget(t, h, "Spend tokens.", "250 of 250 tokens used")
	steps, in, out, err := n.Usage(context.Background(), run)
	if err != nil || steps != 5 || in != 150 || out != 100 {
		t.Fatalf("usage: %d steps, %d+%d tokens (%v); want 5 steps, 150+100 tokens: the parent's two and the children's three", steps, in, out, err)
	}
	if got := int64(len(parent.Requests())) + childCalls.Load(); got != 5 {
		t.Fatalf("%d model requests, want 5: none past the gate", got)
	}
}

// C28: a child's completion that lands after the parent's wait read it as
// running, and before the parent's attempt has parked, is not lost: the
// wake reaches the running attempt, and the run tries again as soon as it
// parks. The hooks make the race happen every time: the wait, having read
// the child running, lets the child finish and holds the attempt until
// the child's wake has reached the parent.
func TestChildFinishingWhileParentParks(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	g := &gate{}
	parent := &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}
	pending := make(chan string, 64)
	var once sync.Once
	var raced atomic.Bool
	waitRead := func(runID string) {
		once.Do(func() {
			g.release(`{"n":1}`)
			timeout := time.After(30 * time.Second)
			for {
				select {
				case r := <-pending:
					if r == runID {
						raced.Store(true)
						return
					}
				case <-timeout:
					return
				}
			}
		})
	}
	onPending := func(runID string) {
		select {
		case pending <- runID:
		default:
		}
	}
	h := &harness{nc: nc, parent: parent, child: childModel{g: g}, hooks: actors.Hooks{WaitRead: waitRead, Pending: onPending}}
	n := h.start(t)
	defer closeNode(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "Race.")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess, run)
	if !raced.Load() {
		t.Fatal("the child's wake never reached the parent while its attempt ran: the race did not happen")
	}
	wr := waitResult(t, history(t, nc, sess, run), "w")
	if len(wr.Calls) != 1 || wr.Calls[0].Status != runtime.StatusCompleted {
		t.Fatalf("wait result %+v", wr)
	}
}

// C28: a run that waited with a timeout and then waits again without one
// is woken at the deadline of the wait it is parked on, never at the
// passed deadline of its earlier wait (which would wake it at once, and
// again at every park, until its child finished). The first wait finds
// its child done (the parent asks for it only then), so the run parks on
// the second alone: with nothing due, no timer is armed, and the node's
// clock passing the first wait's deadline wakes nothing.
func TestEarlierWaitDeadlineDoesNotWake(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	g := &gate{}
	g.release(`{"n":1}`)
	aDone := make(chan struct{})
	parent := &holdCall{call: "w1", until: aDone, Model: &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`), model.Call("b", "spawn_worker", `{"n":2}`)),
		model.Reply(model.Call("w1", "wait_calls", `{"ids":["a"],"timeout_seconds":1}`)),
		model.Reply(model.Call("w2", "wait_calls", `{"ids":["b"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}}
	var reads atomic.Int64
	parked := &parkedOn{call: "w2", ch: make(chan struct{})}
	clk := clock.NewFake(time.Now())
	h := &harness{nc: nc, parent: parent, child: childModel{g: g}, sink: parked.sink, clock: clk, idle: 200 * time.Millisecond,
		hooks: actors.Hooks{WaitRead: func(string) { reads.Add(1) }}}
	n := h.start(t)
	defer closeNode(t, n)
	stops := watchStops(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "Wait twice.")
	if err != nil {
		t.Fatal(err)
	}
	as, ar := actors.ChildIDs(run, "a")
	result(t, n, as, ar)
	close(aDone)
	waitEvent(t, parked.ch, "the parent parks on w2")
	// Passivated: its parks were handled to the end (a timer one armed
	// would be armed by now).
	waitEvent(t, stops.of(sess+"."+run), "the parked parent's actor passivates")
	// Past w1's deadline, with the parent parked on w2.
	if armed := clk.Armed(); armed != 0 {
		t.Fatalf("%d timers armed for a run parked on a wait without a deadline", armed)
	}
	if fired := clk.Advance(2 * time.Second); fired != 0 {
		t.Fatalf("%d timers fired as the clock passed the first wait's deadline: the parked run was woken", fired)
	}
	g.release(`{"n":2}`)
	result(t, n, sess, run)
	// w1 read once, w2 a few times (its park, a wake a's completion left
	// pending, b finishing): a wake loop on w1's deadline makes hundreds.
	if got := reads.Load(); got > 6 {
		t.Fatalf("the parent's waits read their children %d times: it was woken while parked", got)
	}
	msgs := history(t, nc, sess, run)
	if wr := waitResult(t, msgs, "w1"); wr.TimedOut || len(wr.Calls) != 1 || wr.Calls[0].Status != runtime.StatusCompleted {
		t.Fatalf("w1 = %+v", wr)
	}
}

// holdCall holds its model's response that makes call until until is
// closed.
type holdCall struct {
	model.Model
	call  string
	until <-chan struct{}
}

func (h *holdCall) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	r, err := h.Model.Generate(ctx, req)
	if err != nil {
		return r, err
	}
	for _, c := range r.Message.ToolCalls() {
		if c.ID == h.call {
			select {
			case <-h.until:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return r, nil
}

// parkedOn closes ch when a run parks on the wait call (the first time).
type parkedOn struct {
	call string
	ch   chan struct{}
	once sync.Once
}

func (p *parkedOn) sink(_ events.Run, ev runtime.SinkEvent) {
	if ev.Kind == runtime.SinkWaiting && ev.CallID == p.call {
		p.once.Do(func() { close(p.ch) })
	}
}

// bucketRefuse makes a node's KV bucket refuse every write (a full stream
// that discards new messages) and returns what restores it.
func bucketRefuse(t *testing.T, nc *nats.Conn, bucket string) (refuse, restore func()) {
	return streamRefuse(t, nc, "KV_"+bucket)
}

// streamRefuse makes a stream refuse every write and returns what
// restores it.
func streamRefuse(t *testing.T, nc *nats.Conn, stream string) (refuse, restore func()) {
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	set := func(full bool) {
		ctx := context.Background()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Error(err)
			return
		}
		cfg := s.CachedInfo().Config
		cfg.MaxMsgs, cfg.Discard = -1, njs.DiscardOld
		if full {
			cfg.MaxMsgs, cfg.Discard = int64(s.CachedInfo().State.Msgs), njs.DiscardNew
		}
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Error(err)
		}
	}
	return func() { set(true) }, func() { set(false) }
}

// A run that fails (here on its budget) while the log refuses writes gets
// its end written once the log takes writes again: it never stays
// "running" for good, with its caller waiting on it.
func TestFailedRunEndIsWrittenAfterALogOutage(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	refuse, restore := streamRefuse(t, nc, "CAIRN")
	var failed, retried sync.Once
	parent := &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}
	h := &harness{nc: nc, parent: parent, child: childModel{g: &gate{}}, budget: runtime.Budget{Steps: 1},
		log: multiLog{
			onLog{msg: "run failed", errText: "budget", once: &failed, fn: refuse},
			onLog{msg: "write the end of a failed run", errText: "", once: &retried, fn: restore},
		}}
	n := h.start(t)
	defer closeNode(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "One step only.")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, _, err := n.Result(ctx, sess, run)
	if st != runtime.StatusFailed || !strings.Contains(fmt.Sprint(err), "budget") {
		t.Fatalf("root = %s, %v; want failed on its budget", st, err)
	}
}

// multiLog sends each record to every handler.
type multiLog []slog.Handler

func (m multiLog) Enabled(context.Context, slog.Level) bool { return true }
func (m multiLog) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m multiLog) WithGroup(string) slog.Handler            { return m }
func (m multiLog) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range m {
		_ = h.Handle(ctx, r.Clone())
	}
	return nil
}

// closeNode closes n, failing the test when Close reports an error.
func closeNode(t testing.TB, n *actors.Node) {
	t.Helper()
	if err := n.Close(context.Background()); err != nil {
		t.Errorf("close the node: %v", err)
	}
}

// blockingModel blocks every step until its context ends, and says when
// a step has begun.
type blockingModel struct{ entered chan struct{} }

func (m blockingModel) Generate(ctx context.Context, _ model.Request) (*model.Response, error) {
	select {
	case m.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// Close(ctx) cut short by its context still closes the node (its attempts
// cancelled, its writers' subscriptions gone) and returns the context's
// error; a second Close returns nil.
func TestCloseCutShortByItsContext(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	// nats.go's shared request inbox lives as long as the connection: it
	// is there before Start and after Close.
	if _, err := nc.Request("$JS.API.INFO", nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	before := nc.NumSubscriptions()
	entered := make(chan struct{}, 1)
	h := &harness{nc: nc, parent: blockingModel{entered: entered}, child: childModel{}}
	n := h.start(t)
	if _, _, err := n.Run(context.Background(), "planner", "Wait."); err != nil {
		t.Fatal(err)
	}
	<-entered // an attempt is in its model step; the drain would wait for it
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with a cancelled context while an attempt runs: %v; want context.Canceled", err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if got := nc.NumSubscriptions(); got != before {
		t.Errorf("subscriptions on the node's connection after Close: %d, before Start %d: Close left some behind", got, before)
	}
}

// refusing answers every request with an error the provider marks
// permanent (a 401, say), and counts the requests.
type refusing struct{ n atomic.Int64 }

func (r *refusing) Generate(context.Context, model.Request) (*model.Response, error) {
	r.n.Add(1)
	return nil, model.Permanent(errors.New("openai: 401 Unauthorized: invalid api key"))
}

// A model error that cannot succeed on retry fails the run after one
// request: before, every attempt sent it again (6 requests with the
// default retries, each spending a budget step).
func TestPermanentModelErrorIsNotRetried(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	m := &refusing{}
	h := &harness{nc: nc, parent: m, child: childModel{}, maxRetries: 3}
	n := h.start(t)
	defer closeNode(t, n)
	sess, run, err := n.Run(context.Background(), "planner", "Plan.")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, _, err := n.Result(ctx, sess, run)
	if st != runtime.StatusFailed || !strings.Contains(fmt.Sprint(err), "401") {
		t.Fatalf("= %s, %v; want failed with the provider's 401", st, err)
	}
	if got := m.n.Load(); got != 1 {
		t.Fatalf("the model was asked %d times; a permanent error is not retried", got)
	}
}

// A step reserved ahead (with the write that recorded the response before
// it) that the attempt never takes, because the node drained it first, is
// given back: the run, resumed on the next node, takes its second and last
// step within its budget of two. Without the refund the drained attempt
// spent a step it never took, and the resumed run failed on its budget.
//
// With the budget in the bucket (level 3), for a run begun in the bucket
// and resumed by a node that keeps new runs' budgets in the log (a run
// keeps its budget where it began), in the log (level 0: this build's),
// where the step is reserved later, by the call's result's commit
// (TestBudgetInTheLog gives back one reserved so), and for a run begun in
// the log and resumed by a node at level 3 (as every member of a cluster
// is for a while after it starts: it keeps the run's budget in the log,
// whose version it writes for that run alone).
func TestStepReservedAheadAndNotTakenIsGivenBack(t *testing.T) {
	for _, levels := range [][2]int{{0, 0}, {3, 3}, {3, 0}, {0, 3}} {
		t.Run(fmt.Sprintf("levels=%d,%d", levels[0], levels[1]), func(t *testing.T) {
			stepReservedAheadAndGivenBack(t, levels)
		})
	}
}

func stepReservedAheadAndGivenBack(t *testing.T, levels [2]int) {
	nc := natstest.Connect(t, natstest.Server(t))
	m := &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("h", "run_js", `{"code":"hang"}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"after the drain"}}`)),
	}}
	hanging := make(chan struct{}, 1)
	start := func(level int) *actors.Node {
		n, err := actors.Start(context.Background(), actors.Config{
			Conn: nc, SchemaLevel: level,
			Agents: []actors.Agent{{Definition: runtime.AgentDefinition{Slug: "solo", Instructions: "Answer.", OutputSchema: json.RawMessage(outSchema)},
				Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}, Budget: runtime.Budget{Steps: 2}}},
			Model: func(actors.Agent) (model.Model, error) { return m, nil },
			// The signal comes from the executor running the hanging script:
			// the sink's tool-call event came before the dispatch, and a
			// close in between drained the attempt with the call put back to
			// pending, which the next node then ran, and hung on.
			Backend: &runtimetest.Backend{}, Executors: signalling{f: &runtimetest.Executors{}, callID: "h", ch: hanging}, Redactor: runtime.Secrets{}, Logger: testLogger(t),
			DrainTimeout: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ctx := context.Background()
	first := start(levels[0])
	sess, run, err := first.Run(ctx, "solo", "Two steps.")
	if err != nil {
		t.Fatal(err)
	}
	<-hanging // the first response is committed, the second step reserved ahead, the script hangs
	closeNode(t, first)
	second := start(levels[1])
	defer closeNode(t, second)
	rctx, cancel := context.WithTimeout(ctx, time.Minute) // a last resort: Result returns when the run ends
	defer cancel()
	st, reply, err := second.Result(rctx, sess, run)
	if err != nil || st != runtime.StatusCompleted {
		t.Fatalf("the resumed run: %s, %v; want it completed within its two steps", st, err)
	}
	if reply == nil {
		t.Fatal("no reply")
	}
	if steps, _, _, err := second.Usage(ctx, run); err != nil || steps != 2 {
		t.Fatalf("steps used %d (%v), want 2: the drained attempt's step ahead given back", steps, err)
	}
	// In the log, the second step is reserved by the commit of the call's
	// result (on the second node), not ahead of the call: there is nothing
	// to give back, and nothing written to the bucket.
	checkBudgetPlace(t, nc, levels[0] == 0, 0)
}

// signalling is an executor factory whose executors signal ch when they
// start the script of callID.
type signalling struct {
	f      jstool.Factory
	callID string
	ch     chan struct{}
}

func (s signalling) NewExecutor(ctx context.Context, cfg jstool.Config) (jstool.Executor, error) {
	e, err := s.f.NewExecutor(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return signallingExecutor{Executor: e, s: s}, nil
}

type signallingExecutor struct {
	jstool.Executor
	s signalling
}

func (e signallingExecutor) Execute(ctx context.Context, sc jstool.Script) (jstool.Outcome, error) {
	if sc.CallID == e.s.callID {
		select {
		case e.s.ch <- struct{}{}:
		default:
		}
	}
	return e.Executor.Execute(ctx, sc)
}

// C24, C34 for a root run that keeps its budget in its log: before each
// model request, the run's totals (Node.Usage: its last commit's and its
// side entry's) already count the request's step, and every earlier
// response's tokens; the budgets bucket is never written.
func TestBudgetInTheLogIsDurableBeforeEachRequest(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	u := model.Usage{InputTokens: 10, OutputTokens: 5}
	r1 := model.Reply(model.Call("c1", "run_js", `{"code":"return 1"}`))
	r1.Usage = u
	r2 := model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"2"}}`))
	r2.Usage = u
	m := &usageChecking{inner: &model.Scripted{Steps: []model.Response{r1, r2}}, ready: make(chan struct{})}
	n, err := actors.Start(context.Background(), actors.Config{
		Conn: nc,
		Agents: []actors.Agent{{Definition: runtime.AgentDefinition{Slug: "solo", Instructions: "Answer.", OutputSchema: json.RawMessage(outSchema)},
			Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}, Budget: runtime.Budget{Steps: 3, Tokens: 1000}}},
		Model:   func(actors.Agent) (model.Model, error) { return m, nil },
		Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{}, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeNode(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a last resort: Result returns when the run ends
	defer cancel()
	sess, run, err := n.Run(ctx, "solo", "Two steps.")
	if err != nil {
		t.Fatal(err)
	}
	m.n, m.run = n, run
	close(m.ready)
	if st, _, err := n.Result(ctx, sess, run); err != nil || st != runtime.StatusCompleted {
		t.Fatalf("= %s, %v; want completed", st, err)
	}
	if err := m.failed(); err != nil {
		t.Fatal(err)
	}
	if steps, in, out, err := n.Usage(ctx, run); err != nil || steps != 2 || in != 20 || out != 10 {
		t.Fatalf("usage %d steps, %d+%d tokens (%v); want 2 steps, 20+10 tokens", steps, in, out, err)
	}
	checkBudgetPlace(t, nc, true, 0)
}

// usageChecking is a model that, before each request, checks that the
// run's totals count the request's step and every earlier response's
// tokens.
type usageChecking struct {
	inner model.Model
	ready chan struct{} // closed once n and run are set
	n     *actors.Node
	run   string

	mu    sync.Mutex
	calls int
	err   error // the first failed check
}

func (m *usageChecking) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	<-m.ready
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	steps, in, out, err := m.n.Usage(ctx, m.run)
	if err == nil && (steps < m.calls || in+out != int64(15*(m.calls-1))) {
		err = fmt.Errorf("request %d: the budget counts %d steps and %d tokens: want the request's step and %d tokens charged before it", m.calls, steps, in+out, 15*(m.calls-1))
	}
	if err != nil && m.err == nil {
		m.err = err
	}
	return m.inner.Generate(ctx, req)
}

func (m *usageChecking) failed() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil && m.calls != 2 {
		return fmt.Errorf("%d requests, want 2", m.calls)
	}
	return m.err
}
