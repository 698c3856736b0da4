package actors

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// offsetClock is a node clock the test moves ahead of real time.
type offsetClock struct{ ahead atomic.Int64 }

func (c *offsetClock) now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *offsetClock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

// startInternal starts a node with one agent, "solo", whose scripted model
// completes at its first step.
func startInternal(t *testing.T, nc *nats.Conn, clock *offsetClock, opts ...func(*Config)) *Node {
	t.Helper()
	done := &model.Scripted{Steps: []model.Response{model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`))}}
	cfg := Config{
		Conn: nc,
		Agents: []Agent{{Definition: runtime.AgentDefinition{Slug: "solo", Instructions: "Answer.",
			OutputSchema: json.RawMessage(`{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}},"additionalProperties":false}`)},
			Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}, Budget: runtime.Budget{Steps: 10}}},
		Model:   func(Agent) (model.Model, error) { return done, nil },
		Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{},
		Logger: slog.New(slog.DiscardHandler),
	}
	if clock != nil {
		cfg.Now = clock.now
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if clock != nil { // time passes for the server too
		n.serverClock = func(ctx context.Context) (time.Time, error) {
			now, err := n.serverNow(ctx)
			return now.Add(time.Duration(clock.ahead.Load())), err
		}
	}
	t.Cleanup(func() { closeNode(t, n) })
	return n
}

// Issue 22: a node panicked on restart with a nil pointer in
// (*member).isCurrent, reached from request (through wakeWorker) before
// Start had set the member: the member's actors run, and wake runs, as soon
// as the member is in the topology. A request now waits for the member, and
// gives up when the node closes first.
func TestRequestBeforeTheMemberIsSet(t *testing.T) {
	t.Run("closed before it has a member", func(t *testing.T) {
		n := &Node{logger: slog.New(slog.DiscardHandler), drain: make(chan struct{}), memberSet: make(chan struct{})}
		delivered := make(chan bool, 1)
		go func() { delivered <- n.request(identity("s1", "r1"), &actorspb.Wake{SessionId: "s1", RunId: "r1"}) }()
		n.abandon()
		if <-delivered {
			t.Fatal("a request on a node closed before it had a member was reported delivered")
		}
	})
	t.Run("a wake waits for the member", func(t *testing.T) {
		nc := natstest.Connect(t, natstest.Server(t))
		n := startInternal(t, nc, nil)
		// Back to the moment before Start set the member.
		n.mu.Lock()
		m := n.member
		n.member, n.memberSet = nil, make(chan struct{})
		n.mu.Unlock()
		ctx := context.Background()
		sess, run, err := n.Run(ctx, "solo", "Answer.") // its wake waits for the member
		if err != nil {
			t.Fatal(err)
		}
		n.setMember(m)
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if st, _, err := n.Result(rctx, sess, run); err != nil || st != runtime.StatusCompleted {
			t.Fatalf("run woken before the member was set: %s, %v; want completed", st, err)
		}
	})
}

// An attempt, or a sweep, of a run in the active set with no record (a
// start that died between admitting it and writing it) writes nothing and
// ends nothing while the entry is younger than admitGrace (the record may
// still come), and takes the entry out of the set after that.
func TestRunWithNoRecordWaitsOutTheGrace(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	clock := &offsetClock{}
	n := startInternal(t, nc, clock, func(c *Config) { c.activeKV = true })
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, activeBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		check func(sess, run string) error
	}{
		{"attempt", func(sess, run string) error {
			n.attempts.Add(1)
			_, _, err := n.attempt(ctx, n.current(), sess, run, lifecycle.ReasonStarted, nil)
			return err
		}},
		{"sweep", func(sess, run string) error {
			return n.sweep(ctx, n.current(), false, false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock.ahead.Store(0)
			sess, run := newID("s"), newID("r")
			if err := n.markActive(ctx, sess, run); err != nil {
				t.Fatal(err)
			}
			err := tc.check(sess, run)
			if tc.name == "attempt" && !errors.Is(err, errNotCreated) {
				t.Fatalf("attempt of a young entry: %v; want errNotCreated", err)
			}
			if tc.name == "sweep" && err != nil {
				t.Fatalf("sweep: %v", err)
			}
			if _, err := kv.Get(ctx, run); err != nil {
				t.Fatalf("the young entry left the active set: %v", err)
			}
			clock.advance(admitGrace + time.Second)
			err = tc.check(sess, run)
			if tc.name == "attempt" && !errors.Is(err, errEnded) {
				t.Fatalf("attempt of an old entry: %v; want errEnded", err)
			}
			if tc.name == "sweep" && err != nil {
				t.Fatalf("sweep: %v", err)
			}
			if _, err := kv.Get(ctx, run); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("the old entry is still in the active set: %v", err)
			}
			st, err := js.Stream(ctx, "CAIRN")
			if err != nil {
				t.Fatal(err)
			}
			if m, err := st.GetLastMsgForSubject(ctx, events.SessionAll(sess)); !errors.Is(err, jetstream.ErrMsgNotFound) {
				t.Fatalf("the log has an event of the run that was never created: %v %v", m, err)
			}
		})
	}
}

// The sweep and an attempt may settle the same unrecorded entry at once;
// the one whose purge is fenced out by the other's finds the entry gone,
// which is what it wanted: both report it gone, neither fails. (Before,
// the loser failed with a revision conflict, and an attempt that should
// have ended the run was retried.)
func TestSettleUnrecordedTwiceAtOnce(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	clock := &offsetClock{}
	n := startInternal(t, nc, clock, func(c *Config) { c.activeKV = true })
	const entries = 16
	var runs [entries][2]string
	for i := range runs {
		runs[i] = [2]string{newID("s"), newID("r")}
		if err := n.markActive(ctx, runs[i][0], runs[i][1]); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(admitGrace + time.Second)
	type answer struct {
		gone bool
		err  error
	}
	answers := make(chan answer, 2*entries)
	start := make(chan struct{})
	for _, r := range runs {
		for range 2 {
			go func() {
				<-start
				gone, _, err := n.settleUnrecorded(ctx, r[0], r[1])
				answers <- answer{gone, err}
			}()
		}
	}
	close(start)
	for range 2 * entries {
		if a := <-answers; a.err != nil || !a.gone {
			t.Errorf("settle of an old unrecorded entry, twice at once: gone %v, %v; want gone, no error", a.gone, a.err)
		}
	}
}

// closeNode closes n, failing the test when Close reports an error.
func closeNode(t testing.TB, n *Node) {
	t.Helper()
	if err := n.Close(context.Background()); err != nil {
		t.Errorf("close the node: %v", err)
	}
}

// A node whose clock runs ahead of the server's by more than admitGrace
// does not drop a young unrecorded entry: before it drops one, it takes
// the entry's age on the server's clock. (Before, the entry's server time
// was compared with the node's clock alone, and a run whose record was on
// its way could lose its place in the active set.)
func TestNodeClockAheadKeepsAYoungEntry(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	clock := &offsetClock{}
	n := startInternal(t, nc, clock, func(c *Config) { c.activeKV = true })
	n.serverClock = n.serverNow // the server's clock does not move
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, activeBucket)
	if err != nil {
		t.Fatal(err)
	}
	sess, run := newID("s"), newID("r")
	if err := n.markActive(ctx, sess, run); err != nil {
		t.Fatal(err)
	}
	clock.advance(admitGrace + time.Minute)
	n.attempts.Add(1)
	if _, _, err := n.attempt(ctx, n.current(), sess, run, lifecycle.ReasonStarted, nil); !errors.Is(err, errNotCreated) {
		t.Fatalf("attempt of a young entry on a node whose clock is ahead: %v; want errNotCreated", err)
	}
	if gone, _, err := n.settleUnrecorded(ctx, sess, run); err != nil || gone {
		t.Fatalf("settle on a node whose clock is ahead: gone %v, %v; want the entry kept", gone, err)
	}
	if _, err := kv.Get(ctx, run); err != nil {
		t.Fatalf("the young entry left the active set: %v", err)
	}
}
