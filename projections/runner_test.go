package projections_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// newLog starts an embedded server with the Cairn stream and returns a
// JetStream context on it.
func newLog(t testing.TB) njs.JetStream {
	t.Helper()
	nc := natstest.Connect(t, natstest.Server(t))
	if _, err := jetstream.New(context.Background(), nc, jetstream.Config{}); err != nil {
		t.Fatal(err)
	}
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// publishAll writes events as the store would, without fencing (the
// projections read, they do not care who wrote).
func publishAll(t testing.TB, js njs.JetStream, log []projections.Event) {
	t.Helper()
	for i, e := range log {
		body, hdrs, err := events.Encode(e.Envelope, fmt.Sprintf("ev%d-%d", e.Seq, i))
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(e.Subject)
		m.Data = body
		for k, v := range hdrs {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// consumers lists the stream's durable consumers.
func consumers(t *testing.T, js njs.JetStream) []string {
	t.Helper()
	st, err := js.Stream(context.Background(), "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	l := st.ConsumerNames(context.Background())
	var out []string
	for n := range l.Name() {
		out = append(out, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitForEnd waits until r's position is the stream's last sequence.
func waitForEnd(t *testing.T, js njs.JetStream, r *projections.Runner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitFor(ctx, info.State.LastSeq); err != nil {
		t.Fatal(err)
	}
}

func catchUp(t *testing.T, r *projections.Runner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
}

// A projection saved with its position resumes exactly after a clean
// restart and after a crash that lost unsaved work, and ends equal to a
// rebuild from sequence 1.
func TestRunnerResumesExactlyAndRebuildsEqual(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("CAIRN_TEST_SEED"), 10, 64); err == nil {
		seed = s // reproduce a logged run
	}
	t.Logf("seed %d (CAIRN_TEST_SEED reproduces it)", seed)
	log := genLog(rand.New(rand.NewPCG(seed, 1)), 600)
	ctx := context.Background()
	for _, mk := range models() {
		t.Run(mk().Name(), func(t *testing.T) {
			js := newLog(t)
			cfg := projections.Config{JS: js, StateBucket: "CAIRN_PROJ_TEST", SaveEvery: time.Hour}
			publishAll(t, js, log[:200])
			r, err := projections.Start(ctx, cfg, mk())
			if err != nil {
				t.Fatal(err)
			}
			// Every event handled (and acknowledged), not only the last one
			// the projection's filters match: events delivered but not yet
			// handled at Close are pending acknowledgements, and the next
			// start rightly makes a new consumer instead of reusing this one.
			waitForEnd(t, js, r)
			if err := r.Close(ctx); err != nil { // clean: saves
				t.Fatal(err)
			}
			before := consumers(t, js)
			publishAll(t, js, log[200:400])
			r, err = projections.Start(ctx, cfg, mk())
			if err != nil {
				t.Fatal(err)
			}
			// A clean restart resumes the same durable consumer.
			if after := consumers(t, js); len(before) != 1 || fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("consumers before the restart %v, after %v", before, after)
			}
			catchUp(t, r)
			if err := r.Save(ctx); err != nil {
				t.Fatal(err)
			}
			saved := r.Seq()
			publishAll(t, js, log[400:])
			catchUp(t, r)
			if r.Seq() == saved {
				t.Fatal("nothing applied after the save")
			}
			r.Abandon() // crash: applied and acknowledged past the saved state
			p := mk()
			r, err = projections.Start(ctx, cfg, p)
			if err != nil {
				t.Fatal(err)
			}
			catchUp(t, r)
			defer r.Close(ctx)
			got, _ := p.Snapshot()

			fresh := mk()
			rb, err := projections.Start(ctx, projections.Config{JS: js}, fresh) // in memory, from sequence 1
			if err != nil {
				t.Fatal(err)
			}
			defer rb.Close(ctx)
			catchUp(t, rb)
			want, _ := fresh.Snapshot()
			if !bytes.Equal(got, want) {
				t.Fatalf("resumed state differs from the rebuild\n got %.400s\nwant %.400s", got, want)
			}
			// Both read on to the stream's end (events no filter matches
			// move the position too) and stop at the same place.
			st, _ := js.Stream(ctx, "CAIRN")
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := r.WaitFor(wctx, info.State.LastSeq); err != nil {
				t.Fatal(err)
			}
			if err := rb.WaitFor(wctx, info.State.LastSeq); err != nil {
				t.Fatal(err)
			}
			if r.Seq() != rb.Seq() {
				t.Fatalf("positions: resumed %d, rebuilt %d", r.Seq(), rb.Seq())
			}
			// Dropped, the projection starts over from sequence 1 and
			// reaches the same state.
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := projections.Drop(ctx, cfg, p.Name()); err != nil {
				t.Fatal(err)
			}
			again := mk()
			ra, err := projections.Start(ctx, cfg, again)
			if err != nil {
				t.Fatal(err)
			}
			defer ra.Close(ctx)
			catchUp(t, ra)
			if b, _ := again.Snapshot(); !bytes.Equal(b, want) {
				t.Fatalf("dropped and rebuilt state differs\n got %.400s\nwant %.400s", b, want)
			}
		})
	}
}

// A log that ends with events the projection's filters do not match: the
// position moves past them and WaitFor returns (it slept until the next
// matching event, which may never come).
func TestRunnerWaitForPastUnmatchedEvents(t *testing.T) {
	js := newLog(t)
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	created, err := events.New(events.RunCreated, "s1", "r1", 0, 0, at, events.Run{RunID: "r1", SessionID: "s1", Agent: "a", RootRunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := events.New(events.LeaseAcquired, "s1", "r1", 0, 1, at, events.Lease{Holder: "n", Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := projections.Start(context.Background(), projections.Config{JS: js}, projections.NewCallTree())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- r.WaitFor(ctx, 2) }() // asleep before the events arrive
	time.Sleep(100 * time.Millisecond)
	publishAll(t, js, []projections.Event{
		{Seq: 1, Subject: events.RunCreatedSubject("s1", "r1"), Envelope: created},
		{Seq: 2, Subject: events.RunLease("s1", "r1"), Envelope: lease}, // the call tree does not read leases
	})
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

// A runner's pull requests are short and beat often, ordered or durable: a
// pull request dies with its consumer leader's server, and nothing is
// delivered until Consume misses two heartbeats. With nats.go's defaults
// (30s expiry, 15s heartbeat for a durable, 5s for an ordered consumer) a
// read model lagged up to 30s after such a death.
func TestRunnerPullsAreShortAndBeat(t *testing.T) {
	for _, cfg := range []projections.Config{{}, {StateBucket: "CAIRN_PROJ_PULLS"}} {
		t.Run(fmt.Sprintf("state bucket %q", cfg.StateBucket), func(t *testing.T) {
			js := newLog(t)
			next := natstest.Pulls(t, js.Conn(), "$JS.API.CONSUMER.MSG.NEXT.CAIRN.>")
			cfg.JS = js
			r, err := projections.Start(context.Background(), cfg, projections.NewCallTree())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			if pull := next(); pull.Expires <= 0 || pull.Expires > 10*time.Second || pull.Heartbeat <= 0 || pull.Heartbeat > 2*time.Second {
				t.Fatalf("pull request: expires %v, heartbeat %v; want at most 10s and 2s", pull.Expires, pull.Heartbeat)
			}
		})
	}
}
