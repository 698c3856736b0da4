package jetstream_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// Two members open the same run at once, both reading it with no lease:
// the one whose lease lands second must not take the first one's lease
// (the same epoch, written by the other holder) for its own. Before each
// take had a Msg-Id of its own, the loser read the winner's lease, found
// its own Msg-Id on it (both were "session.run.lease.1"), took it for its
// lost acknowledgement and went on as a second holder of epoch 1; its
// commits then landed under the winner's lease.
func TestOpensRacingForOneEpoch(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	a := newStore(t, nc, jetstream.Config{Holder: "a"})
	b := newStore(t, nc, jetstream.Config{Holder: "b"})
	ctx := context.Background()
	var once sync.Once
	var hb runtime.Store
	jetstream.WrapPublish(a, func(next jetstream.PublishFunc) jetstream.PublishFunc {
		return func(ctx context.Context, msg *nats.Msg) (*njs.PubAck, error) {
			if strings.HasSuffix(msg.Subject, ".lease") {
				// a has read the run with no lease and is about to write
				// epoch 1: b opens it meanwhile, and writes epoch 1 first.
				once.Do(func() {
					var err error
					if hb, err = b.Open(ctx, "s", "r"); err != nil {
						t.Errorf("b's open: %v", err)
					}
				})
			}
			return next(ctx, msg)
		}
	})
	ha, err := a.Open(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	if hb == nil {
		t.Fatal("b never opened the run")
	}
	// a opened after b: a holds the newest lease, b is fenced out.
	if err := hb.SaveCheckpoint(ctx, cp(1, text("m1", "from b"))); !errors.Is(err, runtime.ErrLeaseLost) {
		t.Fatalf("b's commit after a took the run: %v, want ErrLeaseLost", err)
	}
	if err := ha.SaveCheckpoint(ctx, cp(1, text("m1", "from a"))); err != nil {
		t.Fatalf("a's commit: %v", err)
	}
	var holders []string
	err = a.Scan(ctx, events.RunLease("s", "r"), func(_ string, _ uint64, _ nats.Header, data []byte) error {
		e, err := events.Decode(data)
		var l events.Lease
		if err == nil {
			err = e.Payload(&l)
		}
		holders = append(holders, l.Holder)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(holders, ",") != "b,a" {
		t.Fatalf("leases by %v, want b's then a's", holders)
	}
}

// OpenCreated takes a run's lease with no read when its session holds the
// run's record alone, and refuses, writing nothing, when the session moved
// on since (an end record, another member's lease).
func TestOpenCreated(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, nc, jetstream.Config{Holder: "a"})
	ctx := context.Background()
	create := func(session, run string) uint64 {
		t.Helper()
		_, seq, err := s.CreateRunSeq(ctx, events.Run{SessionID: session, RunID: run, RootRunID: run, Agent: "x", Message: "m"}, 0, created)
		if err != nil || seq == 0 {
			t.Fatalf("create %s: seq %d, %v", run, seq, err)
		}
		return seq
	}

	seq := create("s1", "r1")
	h, err := s.OpenCreated(ctx, "s1", "r1", seq)
	if err != nil {
		t.Fatal(err)
	}
	if !h.AwaitsModel() {
		t.Fatal("a fresh run's handle does not await the model")
	}
	if w, err := h.Load(ctx); err != nil || len(w) != 0 {
		t.Fatalf("window %v, %v; want empty", w, err)
	}
	if err := h.SaveCheckpoint(ctx, cp(1, text("m1", "hello"))); err != nil {
		t.Fatal(err)
	}
	if w, err := h.Load(ctx); err != nil || len(w) != 1 || w[0].ID != "m1" {
		t.Fatalf("window %v, %v; want m1", w, err)
	}
	if n := streamMsgs(t, nc, "CAIRN", events.SessionAll("s1")); n != 3 {
		t.Fatalf("session s1 holds %d events, want the record, the lease and revision 1", n)
	}

	// Moved on: another member took the run first; or the run ended.
	seq = create("s2", "r2")
	other := newStore(t, nc, jetstream.Config{Holder: "b"})
	if _, err := other.Open(ctx, "s2", "r2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenCreated(ctx, "s2", "r2", seq); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("OpenCreated after another member's lease: %v, want ErrConflict", err)
	}
	if n := streamMsgs(t, nc, "CAIRN", events.SessionAll("s2")); n != 2 {
		t.Fatalf("session s2 holds %d events, want the record and b's lease", n)
	}
	seq = create("s3", "r3")
	if _, err := s.Write(ctx, nats.NewMsg(events.RunEndedSubject("s3", "r3")), "end-r3", events.SessionAll("s3"), seq); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenCreated(ctx, "s3", "r3", seq); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("OpenCreated after the run's end: %v, want ErrConflict", err)
	}
	if n := streamMsgs(t, nc, "CAIRN", events.SessionAll("s3")); n != 2 {
		t.Fatalf("session s3 holds %d events, want the record and the end", n)
	}
}
