package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

var created = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// A run is created once: a second creation of it, with whatever record,
// is told it exists and given the stored record; a creation fenced on a
// session that has moved on is a conflict; a continuation fenced on the
// session's last sequence is created.
func TestCreateRun(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, nc, jetstream.Config{})
	ctx := context.Background()
	first := events.Run{SessionID: "s1", RunID: "r1", RootRunID: "r1", Agent: "a", Message: "first"}

	got, err := s.CreateRun(ctx, first, 0, created)
	if err != nil || !reflect.DeepEqual(*got, first) {
		t.Fatalf("CreateRun = %+v, %v; want %+v", got, err, first)
	}
	stored, err := s.ReadRun(ctx, "s1", "r1")
	if err != nil || stored == nil || !reflect.DeepEqual(*stored, first) {
		t.Fatalf("ReadRun = %+v, %v; want %+v", stored, err, first)
	}

	// Within the duplicate window too: a second creation is no lost
	// acknowledgement of the first.
	for _, again := range []events.Run{first, {SessionID: "s1", RunID: "r1", RootRunID: "r1", Agent: "a", Message: "second"}} {
		got, err = s.CreateRun(ctx, again, 0, created.Add(time.Second))
		if !errors.Is(err, jetstream.ErrRunExists) || errors.Is(err, runtime.ErrConflict) {
			t.Fatalf("second CreateRun(%q) = %v, want ErrRunExists alone", again.Message, err)
		}
		if got == nil || !reflect.DeepEqual(*got, first) {
			t.Fatalf("second CreateRun(%q) returned %+v, want the stored %+v", again.Message, got, first)
		}
	}

	// Another run of the session, fenced as if the session were new.
	other := events.Run{SessionID: "s1", RunID: "r2", RootRunID: "r2", Agent: "a", Message: "late", Continues: "r1"}
	got, err = s.CreateRun(ctx, other, 0, created)
	if !errors.Is(err, runtime.ErrConflict) || errors.Is(err, jetstream.ErrRunExists) || got != nil {
		t.Fatalf("CreateRun on a session that moved on = %+v, %v; want ErrConflict", got, err)
	}
	if r, err := s.ReadRun(ctx, "s1", "r2"); err != nil || r != nil {
		t.Fatalf("refused run's record = %+v, %v; want none", r, err)
	}
	last, err := s.Last(ctx, events.SessionAll("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err = s.CreateRun(ctx, other, last.Sequence, created); err != nil || !reflect.DeepEqual(*got, other) {
		t.Fatalf("continuation fenced on seq %d = %+v, %v", last.Sequence, got, err)
	}
	if n := streamMsgs(t, nc, "CAIRN", events.SessionAll("s1")); n != 2 {
		t.Fatalf("session s1 holds %d events, want 2 records", n)
	}

	if _, err := s.CreateRun(ctx, events.Run{SessionID: "s1", RunID: ""}, 0, created); err == nil {
		t.Fatal("CreateRun without a run ID succeeded")
	}
	if _, err := s.CreateRun(ctx, events.Run{SessionID: "bad session", RunID: "r"}, 0, created); err == nil {
		t.Fatal("CreateRun with a bad session ID succeeded")
	}
}

// A creation whose acknowledgement is lost is settled from the log: the
// caller is told it created the run, and one event is stored, whether the
// store learns it by reading the log after a timeout or from the server's
// answer to its retry (R1: wrong last sequence; R3: duplicate).
func TestCreateRunLostAcknowledgement(t *testing.T) {
	lose := func(next jetstream.PublishFunc) jetstream.PublishFunc {
		var once sync.Once
		return func(ctx context.Context, msg *nats.Msg) (*njs.PubAck, error) {
			ack, err := next(ctx, msg)
			lost := false
			once.Do(func() { lost = true })
			if lost && err == nil {
				return nil, nats.ErrTimeout // stored, its answer lost
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
		for _, m := range []struct {
			name string
			wrap func(jetstream.PublishFunc) jetstream.PublishFunc
		}{{"timeout then read", lose}, {"retry answered by the server", retried}} {
			t.Run(fmt.Sprintf("R%d/%s", replicas, m.name), func(t *testing.T) {
				s := storeOn(t, replicas)
				jetstream.WrapPublish(s, m.wrap)
				ctx := context.Background()
				r := events.Run{SessionID: "lost", RunID: "r", RootRunID: "r", Agent: "a", Message: "hello"}
				got, err := s.CreateRun(ctx, r, 0, created)
				if err != nil || !reflect.DeepEqual(*got, r) {
					t.Fatalf("CreateRun = %+v, %v; want %+v", got, err, r)
				}
				last, err := s.Last(ctx, events.SessionAll("lost"))
				if err != nil || last == nil {
					t.Fatalf("session's last event: %v, %v", last, err)
				}
				if last.Sequence != 1 {
					t.Fatalf("session's last event is seq %d: the record was stored more than once", last.Sequence)
				}
			})
		}
	}
}
