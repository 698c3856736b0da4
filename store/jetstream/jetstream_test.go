package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/store/storetest"
)

func newStore(t *testing.T, nc *nats.Conn, cfg jetstream.Config) *jetstream.Store {
	t.Helper()
	s, err := jetstream.New(context.Background(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// storeOn returns a store on one server (replicas 1) or on a fresh
// three-server cluster, connected to its last member.
func storeOn(t *testing.T, replicas int) *jetstream.Store {
	t.Helper()
	if replicas == 1 {
		return newStore(t, natstest.Connect(t, natstest.Server(t)), jetstream.Config{})
	}
	servers := natstest.Cluster(t, replicas)
	return newStore(t, natstest.Connect(t, servers[replicas-1]), jetstream.Config{Replicas: replicas})
}

func cp(rev int64, msgs ...model.Message) *runtime.Checkpoint {
	return &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseModel, Append: msgs}
}

func text(id, s string) model.Message { return model.TextMessage(id, model.RoleUser, s) }

func history(t *testing.T, s runtime.Store) []string {
	t.Helper()
	h, err := s.(session.Auditor).History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range h {
		ids = append(ids, m.ID)
	}
	return ids
}

func TestConformanceR3(t *testing.T) {
	servers := natstest.Cluster(t, 3)
	nc := natstest.Connect(t, servers[1])
	s := newStore(t, nc, jetstream.Config{Replicas: 3})
	var n atomic.Int64
	storetest.Run(t, func(*testing.T) storetest.Opener {
		return sessionScoped{s: s, prefix: fmt.Sprintf("r3-%d-", n.Add(1))}
	})
}

// C13, D2: 20 writers commit the same revision: exactly one wins (the
// expected-sequence fence on the session's subjects), whether they
// share a handle or each hold one (then all but the newest lease are fenced).
func TestConcurrentWriters(t *testing.T) {
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprintf("R%d", replicas), func(t *testing.T) {
			s := storeOn(t, replicas)
			ctx := context.Background()
			h, err := s.Open(ctx, "same", "r")
			if err != nil {
				t.Fatal(err)
			}
			if err := h.SaveCheckpoint(ctx, cp(1, text("m1", "a"))); err != nil {
				t.Fatal(err)
			}
			// Separate handles: open them all first, then race.
			handles := make([]runtime.Store, 20)
			for i := range handles {
				if handles[i], err = s.Open(ctx, "same", "r"); err != nil {
					t.Fatal(err)
				}
			}
			var wins atomic.Int64
			var wg sync.WaitGroup
			for i, hh := range handles {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := hh.SaveCheckpoint(ctx, cp(2, text(fmt.Sprintf("w%d", i), "x")))
					switch {
					case err == nil:
						wins.Add(1)
					case errors.Is(err, runtime.ErrLeaseLost), errors.Is(err, runtime.ErrConflict):
					default:
						t.Errorf("writer %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Fatalf("%d writers of revision 2 won, want 1", wins.Load())
			}
			if ids := history(t, handles[19]); len(ids) != 2 || ids[1] != "w19" {
				t.Fatalf("history = %v: only the newest lease may write", ids)
			}
		})
	}
}

// A committed publish whose acknowledgement is lost is recognized as
// committed, and nothing is stored twice: whether the store learns it by
// reading the log after a timeout, or from the server's answer to a retry
// (R1: wrong last sequence; R3: duplicate).
func TestLostAcknowledgement(t *testing.T) {
	type mode struct {
		name string
		wrap func(jetstream.PublishFunc) jetstream.PublishFunc
	}
	lose := func(next jetstream.PublishFunc) jetstream.PublishFunc {
		var once sync.Once
		return func(ctx context.Context, msg *nats.Msg) (*njs.PubAck, error) {
			ack, err := next(ctx, msg)
			lost := false
			once.Do(func() { lost = strings.Contains(msg.Subject, ".c.") })
			if lost && err == nil {
				return nil, nats.ErrTimeout // stored, reply lost
			}
			return ack, err
		}
	}
	retried := func(next jetstream.PublishFunc) jetstream.PublishFunc {
		return func(ctx context.Context, msg *nats.Msg) (*njs.PubAck, error) {
			if _, err := next(ctx, msg); err != nil {
				return nil, err
			}
			return next(ctx, msg) // the server's answer to the retry
		}
	}
	for _, replicas := range []int{1, 3} {
		for _, m := range []mode{{"timeout then read", lose}, {"retry answered by the server", retried}} {
			t.Run(fmt.Sprintf("R%d/%s", replicas, m.name), func(t *testing.T) {
				s := storeOn(t, replicas)
				jetstream.WrapPublish(s, m.wrap)
				ctx := context.Background()
				h, err := s.Open(ctx, "sess", "run")
				if err != nil {
					t.Fatal(err)
				}
				for rev := int64(1); rev <= 3; rev++ {
					if err := h.SaveCheckpoint(ctx, cp(rev, text(fmt.Sprintf("m%d", rev), "x"))); err != nil {
						t.Fatalf("rev %d: %v", rev, err)
					}
				}
				if ids := history(t, h); fmt.Sprint(ids) != "[m1 m2 m3]" {
					t.Fatalf("history = %v", ids)
				}
				got, err := h.LoadCheckpoint(ctx)
				if err != nil || got.Revision != 3 {
					t.Fatalf("checkpoint = %+v, %v", got, err)
				}
			})
		}
	}
}

// Large payloads go to the object store and come back intact (C16).
func TestLargePayloadOutOfLine(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, nc, jetstream.Config{})
	ctx := context.Background()
	h, err := s.Open(ctx, "big", "r")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("0123456789abcdef", 200_000) // 3.2 MB, over the 1 MB payload limit
	if err := h.SaveCheckpoint(ctx, cp(1, text("m1", big))); err != nil {
		t.Fatal(err)
	}
	fresh, err := s.Open(ctx, "big", "r")
	if err != nil {
		t.Fatal(err)
	}
	w, err := fresh.Load(ctx)
	if err != nil || len(w) != 1 || w[0].Text() != big {
		t.Fatalf("window after a reload: %d messages, %v", len(w), err)
	}
	got, err := fresh.LoadCheckpoint(ctx)
	if err != nil || got.Revision != 1 || len(got.Append) != 1 || got.Append[0].Text() != big {
		t.Fatalf("checkpoint after a reload: %v", err)
	}
}

// An existing stream that does not match is a clear error, never silently
// used (durability depends on it).
func TestStreamMismatch(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	js, _ := njs.New(nc)
	_, err := js.CreateStream(context.Background(), njs.StreamConfig{Name: "CAIRN", Subjects: []string{"cairn.>"}, Storage: njs.MemoryStorage, MaxAge: 3600e9})
	if err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.New(context.Background(), nc, jetstream.Config{})
	if !errors.Is(err, jetstream.ErrStreamMismatch) || !strings.Contains(err.Error(), "storage") {
		t.Fatalf("err = %v, want ErrStreamMismatch naming the storage", err)
	}
	_, err = jetstream.New(context.Background(), nc, jetstream.Config{Replicas: 2})
	if err == nil || !strings.Contains(err.Error(), "Replicas") {
		t.Fatalf("Replicas 2: %v", err)
	}
}

// Bad IDs are refused before any write.
func TestOpenValidatesIDs(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, nc, jetstream.Config{})
	for _, tc := range []struct{ sess, run string }{{"a.b", "r"}, {"s", "*"}, {"", "r"}, {"s", strings.Repeat("x", 200)}, {"s", "a b"}} {
		if _, err := s.Open(context.Background(), tc.sess, tc.run); err == nil {
			t.Fatalf("Open(%q, %q) accepted", tc.sess, tc.run)
		}
	}
	js, _ := njs.New(nc)
	st, _ := js.Stream(context.Background(), "CAIRN")
	info, _ := st.Info(context.Background())
	if info.State.Msgs != 0 {
		t.Fatalf("%d messages written by refused opens", info.State.Msgs)
	}
}
