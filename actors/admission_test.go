package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// held is a model that answers once the test releases it: a run stays
// running until then.
type held struct{ release chan struct{} }

func (h held) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Steps in order, for continuations: the window holds the session's
	// earlier runs.
	r := model.Reply(model.Call("done"+strings.Repeat("x", len(req.Messages)), "complete", `{"type":"output","output":{"answer":"ok"}}`))
	return &r, nil
}

// admissionNode starts a node with two agents on one model ("a" and "b",
// which answer at once unless m is given) and the given clock and hooks.
func admissionNode(t *testing.T, nc *nats.Conn, m model.Model, now func() time.Time, hooks actors.Hooks) *actors.Node {
	t.Helper()
	return admissionNodeOf(t, nc, m, now, hooks, false)
}

// admissionNodeOf is admissionNode, writing the earlier builds' active
// set too when activeKV.
func admissionNodeOf(t *testing.T, nc *nats.Conn, m model.Model, now func() time.Time, hooks actors.Hooks, activeKV bool) *actors.Node {
	t.Helper()
	if m == nil {
		release := make(chan struct{})
		close(release)
		m = held{release: release}
	}
	def := func(slug string) actors.Agent {
		return actors.Agent{Definition: runtime.AgentDefinition{Slug: slug, Instructions: "Answer.", OutputSchema: json.RawMessage(outSchema)},
			Limits: runtime.ModelLimits{ContextTokens: 100000, OutputTokens: 1000}, Budget: runtime.Budget{Steps: 10}}
	}
	cfg := actors.Config{
		Conn: nc, Agents: []actors.Agent{def("a"), def("b")},
		Model:   func(actors.Agent) (model.Model, error) { return m, nil },
		Backend: &runtimetest.Backend{}, Executors: &runtimetest.Executors{}, Redactor: runtime.Secrets{},
		IdleTimeout: 2 * time.Second, Logger: testLogger(t), Now: now, Hooks: hooks,
	}
	if activeKV {
		cfg = actors.WithActiveKV(cfg)
	}
	n, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNode(t, n) })
	return n
}

// logged returns the last event on subject in the run log, nil if none.
func logged(t *testing.T, nc *nats.Conn, subject string) *njs.RawStreamMsg {
	t.Helper()
	js, _ := njs.New(nc)
	st, err := js.Stream(context.Background(), "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), subject)
	if errors.Is(err, njs.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// events counts a session's events in the log by type.
func sessionEvents(t *testing.T, nc *nats.Conn, sess string) map[events.Type]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := njs.New(nc)
	cons, err := js.OrderedConsumer(ctx, "CAIRN", njs.OrderedConsumerConfig{FilterSubjects: []string{events.SessionAll(sess)}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[events.Type]int{}
	last := logged(t, nc, events.SessionAll(sess))
	if last == nil {
		return out
	}
	for {
		msg, err := cons.Next(njs.FetchContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := events.Decode(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		out[ev.Type]++
		if meta, _ := msg.Metadata(); meta != nil && meta.Sequence.Stream >= last.Sequence {
			return out
		}
	}
}

// waitPurged waits, on a watch (no polling), until the active set's key
// of run is gone.
func waitPurged(t *testing.T, nc *nats.Conn, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, _ := njs.New(nc)
	kv, err := js.KeyValue(ctx, "cairn_active")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	present := false
	for {
		select {
		case e := <-w.Updates():
			switch {
			case e == nil: // the initial values are delivered
				if !present {
					return
				}
			case e.Operation() == njs.KeyValuePut:
				present = true
			default:
				return
			}
		case <-ctx.Done():
			t.Fatalf("run %s is still in the active set", run)
		}
	}
}

func inActiveSet(t *testing.T, nc *nats.Conn, run string) bool {
	t.Helper()
	js, _ := njs.New(nc)
	kv, err := js.KeyValue(context.Background(), "cairn_active")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Get(context.Background(), run)
	if err != nil && !errors.Is(err, njs.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func finished(t *testing.T, n *actors.Node, sess, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if st, _, err := n.Result(ctx, sess, run); err != nil || st != runtime.StatusCompleted {
		t.Fatalf("run %s: %s, %v; want completed", run, st, err)
	}
}

var errCrash = errors.New("test: the node died here")

// Issue 22: a start that dies between putting its run in the active set and
// writing its record (the hook fails it there) leaves an entry and nothing
// in the log. The client's retry with the same idempotency key creates the
// run once; an entry whose start nobody retried is taken out of the set by
// the node's first sweep after a restart once it is older than the grace,
// with no event written for it. Before, the record came first (a crash
// after it left a run no sweep found), and a run with no record was failed
// with an end written.
func TestCrashBetweenTrackingAndCreation(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	retried := actors.StartRequest{Owner: "alice", Agent: "a", Message: "Answer.", IdempotencyKey: "retried"}
	abandoned := actors.StartRequest{Owner: "alice", Agent: "a", Message: "Answer.", IdempotencyKey: "abandoned"}
	sessR, runR := actors.KeyedIDs(retried.Owner, retried.IdempotencyKey)
	sessA, runA := actors.KeyedIDs(abandoned.Owner, abandoned.IdempotencyKey)
	var crashedR atomic.Bool
	n := admissionNodeOf(t, nc, nil, nil, actors.Hooks{Admitted: func(_, run string) error {
		if run == runA || (run == runR && crashedR.CompareAndSwap(false, true)) {
			return errCrash
		}
		return nil
	}}, true)
	for _, req := range []actors.StartRequest{retried, abandoned} {
		if _, err := n.StartRun(ctx, req); !errors.Is(err, errCrash) {
			t.Fatalf("start %s: %v; want it to die after the admission", req.IdempotencyKey, err)
		}
	}
	for _, s := range []struct{ sess, run string }{{sessR, runR}, {sessA, runA}} {
		if !inActiveSet(t, nc, s.run) {
			t.Fatalf("run %s is not in the active set after its admission", s.run)
		}
		if m := logged(t, nc, events.SessionAll(s.sess)); m != nil {
			t.Fatalf("the log has %s before the record was to be written", m.Subject)
		}
	}

	// The client retries: the run is created, once, and a later retry finds it.
	got, err := n.StartRun(ctx, retried)
	if err != nil || got.SessionID != sessR || got.RunID != runR || got.Existing {
		t.Fatalf("retry = %+v, %v; want the new run %s", got, err, runR)
	}
	finished(t, n, sessR, runR)
	again, err := n.StartRun(ctx, retried)
	if err != nil || again.RunID != runR || !again.Existing {
		t.Fatalf("retry after the end = %+v, %v; want the same run, existing", again, err)
	}
	if c := sessionEvents(t, nc, sessR)[events.RunCreated]; c != 1 {
		t.Fatalf("session %s has %d created records; want 1", sessR, c)
	}
	waitPurged(t, nc, runR)
	closeNode(t, n)

	// A restart within the grace: nothing is done with the abandoned entry
	// but waiting; past it, the first sweep takes it out of the set.
	later := func() time.Time { return time.Now().Add(3 * time.Minute) }
	admissionNode(t, nc, nil, later, actors.Hooks{ServerClock: func(t time.Time) time.Time { return t.Add(3 * time.Minute) }})
	waitPurged(t, nc, runA)
	if m := logged(t, nc, events.SessionAll(sessA)); m != nil {
		t.Fatalf("the log has %s for a run that was never created", m.Subject)
	}
}

// Issue 22: when the active set refuses writes, a start is refused with
// ErrUnavailable (the API answers 503) and nothing is written: a run whose
// record exists is always one a sweep can find. Before, the run was
// created, and only its attempts tried to put it in the set.
func TestStartRefusedWhileTheActiveSetRefuses(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	n := admissionNodeOf(t, nc, nil, nil, actors.Hooks{}, true)
	sess, run, err := n.Run(ctx, "a", "first")
	if err != nil {
		t.Fatal(err)
	}
	finished(t, n, sess, run)
	refuse, restore := bucketRefuse(t, nc, "cairn_active")
	refuse()
	restored := false
	defer func() {
		if !restored {
			restore()
		}
	}()
	lastCreated := logged(t, nc, events.AllCreated).Sequence
	lastOfSession := logged(t, nc, events.SessionAll(sess)).Sequence
	keyed := actors.StartRequest{Owner: "alice", Agent: "a", Message: "Answer.", IdempotencyKey: "k"}
	if _, err := n.StartRun(ctx, keyed); !errors.Is(err, actors.ErrUnavailable) {
		t.Fatalf("keyed start: %v; want ErrUnavailable", err)
	}
	if _, _, err := n.Run(ctx, "a", "Answer."); !errors.Is(err, actors.ErrUnavailable) {
		t.Fatalf("start: %v; want ErrUnavailable", err)
	}
	if _, err := n.Continue(ctx, sess, "second"); !errors.Is(err, actors.ErrUnavailable) {
		t.Fatalf("continue: %v; want ErrUnavailable", err)
	}
	if m := logged(t, nc, events.AllCreated); m.Sequence != lastCreated {
		t.Fatalf("a record was written while the active set refused: %s", m.Subject)
	}
	if m := logged(t, nc, events.SessionAll(sess)); m.Sequence != lastOfSession {
		t.Fatalf("the continued session moved on while the active set refused: %s", m.Subject)
	}
	restore()
	restored = true
	got, err := n.StartRun(ctx, keyed)
	if err != nil || got.Existing {
		t.Fatalf("keyed start once the set takes writes: %+v, %v", got, err)
	}
	finished(t, n, got.SessionID, got.RunID)
	run2, err := n.Continue(ctx, sess, "second")
	if err != nil {
		t.Fatal(err)
	}
	finished(t, n, sess, run2)
}

// A start with an idempotency key returns the run the key named first,
// running or ended, with the same IDs, and starts nothing; the same key
// with another agent or message is a conflict naming the key; keys are
// per owner; a bad key is refused before anything is written.
func TestIdempotencyKeyReturnsTheSameRun(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	release := make(chan struct{})
	n := admissionNode(t, nc, held{release: release}, nil, actors.Hooks{})
	req := actors.StartRequest{Owner: "alice", Agent: "a", Message: "Answer.", IdempotencyKey: "order-42"}

	// Eight at once: one starts the run, the others find it.
	var wg sync.WaitGroup
	got := make([]actors.Started, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = n.StartRun(ctx, req)
		}()
	}
	wg.Wait()
	created := 0
	for i, s := range got {
		if errs[i] != nil {
			t.Fatalf("start %d: %v", i, errs[i])
		}
		if s.SessionID != got[0].SessionID || s.RunID != got[0].RunID {
			t.Fatalf("start %d = %+v, start 0 = %+v; want the same run", i, s, got[0])
		}
		if !s.Existing {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d starts created the run; want 1", created)
	}
	sess, run := got[0].SessionID, got[0].RunID
	if st, _, _, err := n.Status(ctx, sess, run); err != nil || st != runtime.StatusRunning {
		t.Fatalf("run %s, %v; want running", st, err)
	}
	close(release)
	finished(t, n, sess, run)
	if s, err := n.StartRun(ctx, req); err != nil || s.RunID != run || s.SessionID != sess || !s.Existing {
		t.Fatalf("start after the end = %+v, %v; want run %s, existing", s, err, run)
	}
	if c := sessionEvents(t, nc, sess)[events.RunCreated]; c != 1 {
		t.Fatalf("%d created records; want 1", c)
	}

	for _, tc := range []struct {
		name, field string
		edit        func(r *actors.StartRequest)
	}{
		{"other message", "message", func(r *actors.StartRequest) { r.Message = "Something else." }},
		{"other agent", "agent", func(r *actors.StartRequest) { r.Agent = "b" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req
			tc.edit(&r)
			_, err := n.StartRun(ctx, r)
			var conflict *actors.IdempotencyConflictError
			if !errors.Is(err, actors.ErrIdempotencyConflict) || !errors.As(err, &conflict) || conflict.Key != req.IdempotencyKey || conflict.Field != tc.field {
				t.Fatalf("= %v; want a conflict on key %q, field %s", err, req.IdempotencyKey, tc.field)
			}
		})
	}
	t.Run("another owner", func(t *testing.T) {
		r := req
		r.Owner = "bob"
		s, err := n.StartRun(ctx, r)
		if err != nil || s.Existing || s.RunID == run {
			t.Fatalf("= %+v, %v; want a new run of bob's", s, err)
		}
		finished(t, n, s.SessionID, s.RunID)
	})
	for _, tc := range []struct{ name, key string }{
		{"too long", strings.Repeat("k", actors.MaxIdempotencyKey+1)},
		{"control byte", "order\n42"},
		{"not ASCII", "ordér-42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req
			r.IdempotencyKey = tc.key
			if _, err := n.StartRun(ctx, r); !errors.Is(err, actors.ErrInvalid) {
				t.Fatalf("= %v; want ErrInvalid", err)
			}
			s, kr := actors.KeyedIDs(r.Owner, tc.key)
			if logged(t, nc, events.SessionAll(s)) != nil || inActiveSet(t, nc, kr) {
				t.Fatal("a refused key wrote something")
			}
		})
	}
	if err := actors.ValidIdempotencyKey(strings.Repeat("k", actors.MaxIdempotencyKey)); err != nil {
		t.Fatalf("a key of the longest length: %v", err)
	}
	if err := actors.ValidIdempotencyKey(""); !errors.Is(err, actors.ErrInvalid) {
		t.Fatalf("empty key: %v; want ErrInvalid", err)
	}
}
