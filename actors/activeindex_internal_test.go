package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

func activeIDs(x *activeIndex) []string {
	list := x.active()
	var ids []string
	for _, a := range list {
		ids = append(ids, identity(a.session, a.run))
	}
	slices.Sort(ids)
	return ids
}

// The active set of the log: a run is in it from its created record until
// its completed commit or its end event; nothing else moves it, and an
// event at or below the position (a consumer that starts over) is not
// applied twice.
func TestActiveIndexApply(t *testing.T) {
	type ev struct {
		seq     uint64
		subject string
	}
	for _, tc := range []struct {
		name string
		evs  []ev
		want []string
	}{
		{"created", []ev{{1, events.RunCreatedSubject("s1", "r1")}}, []string{"s1.r1"}},
		{"completed", []ev{{1, events.RunCreatedSubject("s1", "r1")}, {2, events.CheckpointSubject("s1", "r1", false)}, {3, events.CheckpointSubject("s1", "r1", true)}}, nil},
		{"ended", []ev{{1, events.RunCreatedSubject("s1", "r1")}, {2, events.RunLease("s1", "r1")}, {5, events.RunEndedSubject("s1", "r1")}}, nil},
		{"steps, leases and compactions move nothing", []ev{
			{1, events.RunCreatedSubject("s1", "r1")}, {2, events.RunLease("s1", "r1")}, {3, events.CheckpointSubject("s1", "r1", false)},
			{4, events.SessionCompactions("s1")}, {5, events.RunCreatedSubject("s2", "r2")},
		}, []string{"s1.r1", "s2.r2"}},
		{"a continuation of an ended session", []ev{
			{1, events.RunCreatedSubject("s1", "r1")}, {2, events.CheckpointSubject("s1", "r1", true)}, {3, events.RunCreatedSubject("s1", "r2")},
		}, []string{"s1.r2"}},
		{"an event at or below the position is not applied again", []ev{
			{1, events.RunCreatedSubject("s1", "r1")}, {2, events.CheckpointSubject("s1", "r1", true)}, {1, events.RunCreatedSubject("s1", "r1")},
		}, nil},
		{"subjects of another layout", []ev{{1, "cairn.other"}, {2, "$KV.cairn_active.r1"}, {3, events.RunCreatedSubject("s1", "r1")}}, []string{"s1.r1"}},
		// Read while the session was purged: its runs' ends went with the
		// purge before the index reached them; the marker takes the rest.
		{"a purged session whose ends were removed", []ev{
			{1, events.RunCreatedSubject("s1", "r1")}, {2, events.RunCreatedSubject("s1", "r2")}, {3, events.RunCreatedSubject("s2", "r3")},
			{9, events.SessionPurgedSubject("s1")},
		}, []string{"s2.r3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newActiveIndex()
			for _, e := range tc.evs {
				x.apply(e.seq, e.subject)
			}
			if got := activeIDs(x); !slices.Equal(got, tc.want) {
				t.Fatalf("active %v, want %v", got, tc.want)
			}
			if p, _ := x.position(); p < tc.evs[len(tc.evs)-1].seq {
				t.Fatalf("position %d, want at least %d", p, tc.evs[len(tc.evs)-1].seq)
			}
		})
	}
}

// Readiness says the index is still reading, and how far it is, until it
// caught up.
func TestActiveIndexReading(t *testing.T) {
	x := newActiveIndex()
	x.setTarget(40)
	x.apply(12, events.RunCreatedSubject("s1", "r1"))
	if why, reading := x.reading(); !reading || why != "the active set is still reading the log (at sequence 12 of 40)" {
		t.Fatalf("reading %v, %q", reading, why)
	}
	x.caughtUp()
	if why, reading := x.reading(); reading {
		t.Fatalf("caught up and still reading: %q", why)
	}
}

// A start that could not tell whether its record was stored has the run
// woken when the record lands, or at once if it is there already; a bound
// keeps what is awaited finite.
func TestActiveIndexAwait(t *testing.T) {
	x := newActiveIndex()
	woken := map[string]int{}
	wake := func(id string) func() { return func() { woken[id]++ } }
	now := time.Unix(1000, 0)
	x.apply(1, events.RunCreatedSubject("s1", "r1"))
	if !x.await("s1", "r1", now, wake("r1")) || woken["r1"] != 1 {
		t.Fatalf("a run already in the index: woken %d times, want 1", woken["r1"])
	}
	if !x.await("s2", "r2", now, wake("r2")) || woken["r2"] != 0 {
		t.Fatal("a run not in the index was woken before its record landed")
	}
	x.apply(2, events.RunLease("s2", "r2"))
	x.apply(3, events.RunCreatedSubject("s2", "r2"))
	x.apply(4, events.RunCreatedSubject("s2", "r2x"))
	if woken["r2"] != 1 {
		t.Fatalf("woken %d times when its record landed, want 1", woken["r2"])
	}
	x.apply(5, events.CheckpointSubject("s2", "r2", true))
	x.apply(6, events.RunCreatedSubject("s2", "r2"))
	if woken["r2"] != 1 {
		t.Fatalf("woken again (%d) by a later record: an awaited run is woken once", woken["r2"])
	}
	for i := range maxAwaited {
		x.awaited[identity("full", strconv.Itoa(i))] = awaitedRun{wake: func() {}, since: now.Add(time.Duration(i%2) * time.Minute)}
	}
	if x.await("s3", "r3", now.Add(awaitFor), wake("r3")) {
		t.Fatal("await took a run beyond its bound")
	}
	// Later, the older half has waited past awaitFor: dropped for room.
	if !x.await("s3", "r3", now.Add(awaitFor+time.Second), wake("r3")) {
		t.Fatal("await kept creations awaited past awaitFor and refused a new one")
	}
	if n := len(x.awaited); n != maxAwaited/2+1 {
		t.Fatalf("%d awaited, want the younger half and the new one, %d", n, maxAwaited/2+1)
	}
}

// The index follows a real stream: what was in the log when it started
// (read whole, headers only) and what comes after (its starts and ends
// alone), and is ready once it caught up.
func TestActiveIndexFollowsTheLog(t *testing.T) {
	ctx := context.Background()
	js, stream := logStream(t)
	pub := func(subject string) {
		t.Helper()
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{
		events.RunCreatedSubject("s1", "r1"), events.RunLease("s1", "r1"), events.CheckpointSubject("s1", "r1", false),
		events.RunCreatedSubject("s2", "r2"), events.CheckpointSubject("s1", "r1", true),
		events.RunCreatedSubject("s3", "r3"), events.RunEndedSubject("s3", "r3"),
		events.RunCreatedSubject("s4", "r4"), events.CheckpointSubject("s4", "r4", false),
	} {
		pub(sub)
	}
	x := following(t, stream)
	select {
	case <-x.ready:
	case <-time.After(time.Minute):
		t.Fatal("the index never caught up")
	}
	if got, want := activeIDs(x), []string{"s2.r2", "s4.r4"}; !slices.Equal(got, want) {
		t.Fatalf("after catching up: active %v, want %v", got, want)
	}
	// Following: r2 completes, r4 ends, r5 starts; r6's record is awaited,
	// and lands last, so once it is woken everything before is applied.
	landed := make(chan struct{})
	x.await("s6", "r6", time.Now(), func() { close(landed) })
	for _, sub := range []string{
		events.CheckpointSubject("s2", "r2", true), events.RunCreatedSubject("s5", "r5"), events.RunLease("s5", "r5"),
		events.RunEndedSubject("s4", "r4"), events.RunCreatedSubject("s6", "r6"),
	} {
		pub(sub)
	}
	select {
	case <-landed:
	case <-time.After(time.Minute):
		t.Fatal("r6's record landed and it was never woken")
	}
	if got, want := activeIDs(x), []string{"s5.r5", "s6.r6"}; !slices.Equal(got, want) {
		t.Fatalf("following: active %v, want %v", got, want)
	}
}

// logStream is a server's log stream, as a store creates it.
func logStream(t *testing.T) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	s, err := cjs.New(ctx, nc, cjs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	return js, stream
}

// following is an index following stream until the test ends.
func following(t *testing.T, stream jetstream.Stream) *activeIndex {
	t.Helper()
	x := newActiveIndex()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.follow(ctx, stream, slog.New(slog.DiscardHandler), func(d time.Duration) { time.Sleep(d) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return x
}

// An empty log: the index is ready at once.
func TestActiveIndexOfAnEmptyLog(t *testing.T) {
	_, stream := logStream(t)
	x := following(t, stream)
	select {
	case <-x.ready:
	case <-time.After(time.Minute):
		t.Fatal("the index of an empty log never became ready")
	}
}

// A run whose record is in the log is found by the next node's first
// sweep, though nothing ever woke it and nothing but its record was
// written for it: the active set is the log's. (Before, a run was found
// only through its entry in the bucket cairn_active, written at admission.)
func TestRecordedRunIsSweptAfterARestart(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	noSweep := errors.New("this node does not sweep")
	first := startInternal(t, nc, nil, func(c *Config) {
		c.Hooks.Sweep = func(bool, bool) error { return noSweep }
	})
	sess, run := "s-recorded", "r-recorded"
	rec := events.Run{RunID: run, SessionID: sess, Agent: "solo", Message: "Answer.", RootRunID: run, Budget: first.ledger.budgetOf(runtime.Budget{Steps: 10})}
	if _, err := first.runlog.createRun(ctx, rec, 0); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second := startInternal(t, nc, nil)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a last resort: Result returns when the run ends
	defer cancel()
	st, _, err := second.Result(rctx, sess, run)
	if err != nil || st != runtime.StatusCompleted {
		t.Fatalf("the recorded run: %s, %v; want completed", st, err)
	}
	assertNoActiveKV(t, nc)
}

// A start that could not tell whether its record was stored wakes the run
// at once (no record yet: the attempt has nothing to run) and again when
// the record lands, which it does here only afterwards: a node alone
// sweeps once, at its start, so nothing else would ever run it.
func TestRecordLandingLateIsRun(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	n := startInternal(t, nc, nil)
	sess, run := "s-late", "r-late"
	stopped := make(chan string, 16)
	unsubscribe := n.OnActorStopped(func(id string) { stopped <- id })
	defer unsubscribe()
	n.wakeUnknownCreation(errors.New("the acknowledgement was lost"), sess, run)
	for id := range stopped { // the attempt found no record and ended
		if id == identity(sess, run) {
			break
		}
	}
	rec := events.Run{RunID: run, SessionID: sess, Agent: "solo", Message: "Answer.", RootRunID: run, Budget: n.ledger.budgetOf(runtime.Budget{Steps: 10})}
	if _, err := n.runlog.createRun(ctx, rec, 0); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a last resort: Result returns when the run ends
	defer cancel()
	st, _, err := n.Result(rctx, sess, run)
	if err != nil || st != runtime.StatusCompleted {
		t.Fatalf("the run whose record landed late: %s, %v; want completed", st, err)
	}
}

// assertNoActiveKV fails the test if anything was written to the earlier
// builds' active set (its bucket's stream).
func assertNoActiveKV(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), "KV_"+activeBucket)
	if err != nil {
		t.Fatal(err)
	}
	if last := s.CachedInfo().State.LastSeq; last != 0 {
		t.Fatalf("the bucket %s was written %d times; want none", activeBucket, last)
	}
}

// A member of an earlier build sweeps the bucket cairn_active alone. When
// one is in the cluster again after this node stopped writing the bucket,
// the sweep puts every run of the log's active set back in it, those
// admitted meanwhile included.
func TestSweepPutsActiveRunsBackForAnEarlierBuild(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	var sweeps atomic.Bool // the node's own sweeps do nothing until the test's
	n := startInternal(t, nc, nil, func(c *Config) {
		c.activeKV = true // as when a member of an earlier build is in the cluster
		c.Hooks.Sweep = func(bool, bool) error {
			if !sweeps.Load() {
				return errors.New("not yet")
			}
			return nil
		}
	})
	// Three runs admitted while the node wrote no entry (their records
	// alone), never woken: blocked parents, as far as the bucket knows.
	landed := make(chan struct{}, 3)
	var want []string
	for i := range 3 {
		sess, run := fmt.Sprintf("s-back%d", i), fmt.Sprintf("r-back%d", i)
		want = append(want, run)
		n.actives.await(sess, run, time.Now(), func() { landed <- struct{}{} })
		rec := events.Run{RunID: run, SessionID: sess, Agent: "solo", Message: "Answer.", RootRunID: run, Budget: n.ledger.budgetOf(runtime.Budget{Steps: 10})}
		if _, err := n.runlog.createRun(ctx, rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		<-landed
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, activeBucket)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute) // a last resort: the watch ends when all three are put
	defer cancel()
	w, err := kv.WatchAll(wctx, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n.wroteNoKV.Store(true)
	sweeps.Store(true)
	if err := n.sweep(ctx, n.current(), false, false); err != nil {
		t.Fatal(err)
	}
	put := map[string]bool{}
	for len(put) < 3 {
		select {
		case e := <-w.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				put[e.Key()] = true
			}
		case <-wctx.Done():
			t.Fatalf("put back %v of %v", put, want)
		}
	}
	for _, run := range want {
		if !put[run] {
			t.Fatalf("run %s not put back (%v)", run, put)
		}
	}
}
