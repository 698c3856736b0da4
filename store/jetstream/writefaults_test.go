package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// limitBytes sets a stream's MaxBytes (1 refuses every message: a full
// stream answers as a full disk does, a store that failed) and returns
// what restores it.
func limitBytes(t *testing.T, nc *nats.Conn, stream string, max int64) (restore func()) {
	t.Helper()
	ctx := context.Background()
	js, _ := njs.New(nc)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	was := st.CachedInfo().Config
	cfg := was
	cfg.MaxBytes, cfg.Discard = max, njs.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := js.UpdateStream(ctx, was); err != nil {
			t.Fatal(err)
		}
	}
}

// A write the stream refuses to store is a fault of that stream from the
// moment it is answered, whatever other streams do meanwhile, until a
// write to it is stored; a conflict is not a fault.
func TestWriteFaultsFollowEachStream(t *testing.T) {
	srv := natstest.Server(t)
	nc := natstest.Connect(t, srv)
	ctx := context.Background()
	s := newStore(t, nc, jetstream.Config{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
	faults := s.WriteFaults()
	js, _ := njs.New(nc)
	if _, err := js.CreateKeyValue(ctx, njs.KeyValueConfig{Bucket: "probe"}); err != nil {
		t.Fatal(err)
	}
	probe, err := s.LogOn(ctx, "KV_probe")
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	put := func(w *jetstream.Log, subject string, n int) error {
		_, err := w.Write(ctx, &nats.Msg{Subject: subject, Data: []byte("x")}, fmt.Sprintf("%s-%d", subject, n), "", 0)
		return err
	}
	if err := put(s.Log, "cairn.test.a", 0); err != nil || faults.Last() != nil {
		t.Fatalf("a stored write: %v, fault %v", err, faults.Last())
	}
	// A conflict says nothing of storage.
	if _, err := s.Log.Write(ctx, &nats.Msg{Subject: "cairn.test.a", Data: []byte("x")}, "conflict", "cairn.test.a", 99); !errors.Is(err, runtime.ErrConflict) || faults.Last() != nil {
		t.Fatalf("a conflict: %v, fault %v", err, faults.Last())
	}

	restore := limitBytes(t, nc, "CAIRN", 1)
	if err := put(s.Log, "cairn.test.a", 1); err == nil {
		t.Fatal("the full stream stored a write")
	}
	f := faults.Last()
	if f == nil || f.Stream != "CAIRN" {
		t.Fatalf("after a refused write: fault %v, want one of CAIRN", f)
	}
	// Another stream's writes are stored: CAIRN's fault stands.
	if err := put(probe, "$KV.probe.k", 2); err != nil {
		t.Fatal(err)
	}
	if g := faults.Last(); g == nil || g.Stream != "CAIRN" {
		t.Fatalf("after a write to another stream: fault %v, want CAIRN's", g)
	}
	restore()
	if err := put(s.Log, "cairn.test.a", 3); err != nil {
		t.Fatal(err)
	}
	if g := faults.Last(); g != nil {
		t.Fatalf("after a stored write: fault %v, want none", g)
	}
}

// Every try of a publish counts: a publish the server does not answer
// (a single server whose store met a write error answers nothing) is a
// fault when its try's time is up, not after the retries; and a store's
// write errors, as the embedded server reports them, are faults whatever
// the connection's state.
func TestWriteFaultsUnansweredPublish(t *testing.T) {
	srv := natstest.Server(t)
	nc := natstest.Connect(t, srv)
	ctx := context.Background()
	s := newStore(t, nc, jetstream.Config{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
	lost := make(chan struct{})
	jetstream.WrapPublish(s, func(next jetstream.PublishFunc) jetstream.PublishFunc {
		return func(ctx context.Context, msg *nats.Msg) (*njs.PubAck, error) {
			select {
			case <-lost:
				return next(ctx, msg)
			default:
			}
			<-ctx.Done() // never answered
			return nil, ctx.Err()
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := s.Log.Write(ctx, &nats.Msg{Subject: "cairn.test.b", Data: []byte("x")}, "b-1", "", 0)
		done <- err
	}()
	deadline := time.Now().Add(time.Minute)
	for s.WriteFaults().Last() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no fault a minute after a publish went unanswered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f := s.WriteFaults().Last(); f.Stream != "CAIRN" || !errors.Is(f, context.DeadlineExceeded) {
		t.Fatalf("fault %v, want CAIRN's unanswered publish", f)
	}
	close(lost)
	<-done // stored by a retry, or failed: the next write is answered
	if _, err := s.Log.Write(ctx, &nats.Msg{Subject: "cairn.test.b", Data: []byte("x")}, "b-2", "", 0); err != nil {
		t.Fatal(err)
	}
	if f := s.WriteFaults().Last(); f != nil {
		t.Fatalf("after a stored write: fault %v, want none", f)
	}
}

func TestStorageFaultsAreStorageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"no space", fmt.Errorf("write x.blk: %w", syscall.ENOSPC), true},
		{"i/o error", fmt.Errorf("write x.blk: %w", syscall.EIO), true},
		{"insufficient resources", &njs.APIError{ErrorCode: 10023, Code: 503}, true},
		{"storage exceeded", &njs.APIError{ErrorCode: 10047, Code: 500}, true},
		{"full stream", &njs.APIError{ErrorCode: 10077, Code: 503, Description: "maximum bytes exceeded"}, true},
		{"jetstream turned off", &njs.APIError{ErrorCode: 10076, Code: 503}, true},
		{"message too large", &njs.APIError{ErrorCode: 10077, Code: 400, Description: "message size exceeds maximum allowed"}, false},
		{"conflict", &njs.APIError{ErrorCode: 10071, Code: 400}, false},
		{"timeout", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := jetstream.StorageFault(tc.err); got != tc.want {
				t.Fatalf("StorageFault(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
