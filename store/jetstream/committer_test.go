package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/store/storetest"
)

// commitModes are the committer's modes the store's guarantees are tested
// under: forced single, forced batch (every commit, even a lone one, in an
// atomic batch), and adaptive with thresholds low enough that concurrent
// tests switch over.
var commitModes = []struct {
	name string
	gc   jetstream.GroupCommit
}{
	{"single", jetstream.GroupCommit{Mode: jetstream.CommitSingle}},
	{"batch", jetstream.GroupCommit{Mode: jetstream.CommitBatch}},
	{"adaptive", jetstream.GroupCommit{Mode: jetstream.CommitAdaptive, Threshold: 2, MinBatch: 2}},
}

// The conformance suite (C11-C18) holds in every commit mode.
func TestGroupCommitConformance(t *testing.T) {
	for _, m := range commitModes {
		t.Run(m.name, func(t *testing.T) {
			storetest.Run(t, shared(t, jetstream.Config{GroupCommit: m.gc}))
		})
	}
}

// The run loop's crash matrix holds in every commit mode.
func TestGroupCommitCrashMatrix(t *testing.T) {
	for _, m := range commitModes {
		t.Run(m.name, func(t *testing.T) {
			runtimetest.CrashMatrix(t, shared(t, jetstream.Config{GroupCommit: m.gc}), runtimetest.Scenarios())
		})
	}
}

func TestGroupCommitConfig(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	for _, tc := range []struct {
		gc   jetstream.GroupCommit
		want string
	}{
		{jetstream.GroupCommit{Mode: "fast"}, "GroupCommit.Mode"},
		{jetstream.GroupCommit{MaxBatch: 1001}, "GroupCommit.MaxBatch: 1001, the server allows at most 1000"},
		{jetstream.GroupCommit{MaxInflight: 51}, "GroupCommit.MaxInflight: 51, the server allows at most 50"},
		{jetstream.GroupCommit{Threshold: -1}, "GroupCommit.Threshold: -1, must not be negative"},
		{jetstream.GroupCommit{MinBatch: 300, MaxBatch: 200}, "GroupCommit.MinBatch: 300 is above MaxBatch 200"},
		{jetstream.GroupCommit{Linger: 2 * time.Second}, "GroupCommit.Linger: 2s, at most 1s"},
	} {
		_, err := jetstream.New(context.Background(), nc, jetstream.Config{GroupCommit: tc.gc})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.gc, err, tc.want)
		}
	}
}

// A stream made by a store in single mode (or before group commit existed)
// gets atomic publish switched on by a store that batches.
func TestGroupCommitUpgradesStream(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	newStore(t, nc, jetstream.Config{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
	js, _ := njs.New(nc)
	st, err := js.Stream(context.Background(), "CAIRN")
	if err != nil || st.CachedInfo().Config.AllowAtomicPublish {
		t.Fatalf("single mode stream: allow_atomic %v, %v", st.CachedInfo().Config.AllowAtomicPublish, err)
	}
	s := newStore(t, nc, jetstream.Config{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitBatch}})
	h, err := s.Open(context.Background(), "up", "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SaveCheckpoint(context.Background(), cp(1, text("m1", "x"))); err != nil {
		t.Fatal(err)
	}
}

// batchCounter observes the committer's batches and commits.
type batchCounter struct {
	ok, failed, fallbacks, batched atomic.Int64
}

func (c *batchCounter) config(gc jetstream.GroupCommit) jetstream.Config {
	return jetstream.Config{GroupCommit: gc,
		OnBatch: func(ev jetstream.BatchEvent) {
			if ev.Err != nil {
				c.failed.Add(1)
			} else {
				c.ok.Add(1)
			}
		},
		OnCommit: func(ev jetstream.CommitEvent) {
			switch ev.Mode {
			case "fallback":
				c.fallbacks.Add(1)
			case "batch":
				c.batched.Add(1)
			}
		}}
}

// subjectCount is the number of messages stored on subject (wildcards
// allowed).
func subjectCount(t *testing.T, nc *nats.Conn, subject string) uint64 {
	t.Helper()
	return streamMsgs(t, nc, "CAIRN", subject)
}

// One stale writer takes part in batch after batch: its commit fails every
// batch it is in, the batch falls back to single publishes, and exactly
// that writer is told of a conflict; every other commit lands once.
func TestGroupCommitStaleWriterInEveryBatch(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	var c batchCounter
	s := newStore(t, nc, c.config(jetstream.GroupCommit{Mode: jetstream.CommitBatch, MaxInflight: 1, MaxBatch: 64}))
	ctx := context.Background()
	stale, err := s.Open(ctx, "stale", "r")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, "stale", "r"); err != nil { // a newer owner fences the first out
		t.Fatal(err)
	}
	const writers, revs = 24, 12
	var wg sync.WaitGroup
	var done atomic.Bool
	var staleErrs, staleTries atomic.Int64
	errs := make(chan error, writers+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			staleTries.Add(1)
			err := stale.SaveCheckpoint(ctx, cp(1, text("stale-1", "x")))
			if !errors.Is(err, runtime.ErrLeaseLost) && !errors.Is(err, runtime.ErrConflict) {
				errs <- fmt.Errorf("stale writer: %v, want a conflict", err)
				return
			}
			staleErrs.Add(1)
		}
	}()
	var good sync.WaitGroup
	for w := 0; w < writers; w++ {
		good.Add(1)
		go func(w int) {
			defer good.Done()
			h, err := s.Open(ctx, fmt.Sprintf("good%d", w), "r")
			if err != nil {
				errs <- err
				return
			}
			for rev := int64(1); rev <= revs; rev++ {
				if err := h.SaveCheckpoint(ctx, cp(rev, text(fmt.Sprintf("g%d-%d", w, rev), "x"))); err != nil {
					errs <- fmt.Errorf("writer %d rev %d: %w", w, rev, err)
					return
				}
			}
		}(w)
	}
	good.Wait()
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := 0; w < writers; w++ {
		if n := subjectCount(t, nc, events.RunCheckpoints(fmt.Sprintf("good%d", w), "r")); n != revs {
			t.Errorf("writer %d: %d commits stored, want %d", w, n, revs)
		}
	}
	if n := subjectCount(t, nc, events.RunCheckpoints("stale", "r")); n != 0 {
		t.Errorf("the stale writer stored %d commits", n)
	}
	// The test is only meaningful if batches both failed (the stale writer
	// was in them) and committed.
	if c.failed.Load() == 0 || c.ok.Load() == 0 || c.fallbacks.Load() == 0 {
		t.Errorf("batches: %d committed, %d failed, %d fallbacks; the test did not exercise both paths", c.ok.Load(), c.failed.Load(), c.fallbacks.Load())
	}
	t.Logf("stale writer refused %d times; batches %d committed, %d failed; %d commits batched, %d fell back", staleErrs.Load(), c.ok.Load(), c.failed.Load(), c.batched.Load(), c.fallbacks.Load())
}

// Lost batch acknowledgements: the commit reached the server and was
// stored, but its answer is lost (or the commit never left): every caller
// recovers its true outcome from the log, nothing is stored twice.
func TestGroupCommitLostAck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store bool // the commit reaches the server before the answer is lost
	}{{"stored", true}, {"never sent", false}} {
		t.Run(tc.name, func(t *testing.T) {
			nc := natstest.Connect(t, natstest.Server(t))
			var c batchCounter
			s := newStore(t, nc, c.config(jetstream.GroupCommit{Mode: jetstream.CommitBatch}))
			var lost atomic.Int64
			jetstream.WrapBatchRequest(s, func(next jetstream.BatchRequestFunc) jetstream.BatchRequestFunc {
				return func(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
					if lost.Add(1)%2 == 0 { // every other batch
						return next(ctx, msg)
					}
					if tc.store {
						if _, err := next(ctx, msg); err != nil {
							return nil, err
						}
					}
					return nil, nats.ErrTimeout
				}
			})
			ctx := context.Background()
			const writers, revs = 8, 6
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					h, err := s.Open(ctx, fmt.Sprintf("la%d", w), "r")
					if err != nil {
						errs <- err
						return
					}
					for rev := int64(1); rev <= revs; rev++ {
						if err := h.SaveCheckpoint(ctx, cp(rev, text(fmt.Sprintf("m%d", rev), "x"))); err != nil {
							errs <- fmt.Errorf("writer %d rev %d: %w", w, rev, err)
							return
						}
					}
				}(w)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for w := 0; w < writers; w++ {
				if n := subjectCount(t, nc, events.RunCheckpoints(fmt.Sprintf("la%d", w), "r")); n != revs {
					t.Errorf("writer %d: %d commits stored, want %d", w, n, revs)
				}
			}
			if c.failed.Load() == 0 || c.fallbacks.Load() == 0 {
				t.Errorf("no batch lost its answer (%d failed, %d fallbacks)", c.failed.Load(), c.fallbacks.Load())
			}
		})
	}
}
