package actors_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// A run that finishes leaves the active set for good (the set is what the
// sweep reads to find runs to resume after their owner is gone, C28's
// resume through restarts): its key is rolled up
// into a purge marker that expires, where a delete marker stayed forever
// and every sweep read every run that ever finished. A delete marker an
// earlier build left is replaced by the node's first sweep.
func TestFinishedRunsLeaveTheActiveSet(t *testing.T) {
	ctx := context.Background()
	srv := natstest.Server(t)
	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	old, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cairn_active", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "rOld", []byte(`{"session_id":"sOld"}`)); err != nil {
		t.Fatal(err)
	}
	if err := old.Delete(ctx, "rOld"); err != nil { // an earlier build's delete marker
		t.Fatal(err)
	}
	threeChildrenDone(t, nc)
	kv, err := js.KeyValue(ctx, "cairn_active")
	if err != nil {
		t.Fatal(err)
	}
	// The purges follow the completions (and the first sweep) shortly:
	// wait for them, then check what is left.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var live, markers []string
		w, err := kv.WatchAll(ctx, jetstream.IncludeHistory())
		if err != nil {
			t.Fatal(err)
		}
		last := map[string]jetstream.KeyValueOp{}
		for e := range w.Updates() {
			if e == nil {
				break
			}
			last[e.Key()] = e.Operation()
		}
		_ = w.Stop()
		for key, op := range last {
			if op == jetstream.KeyValuePurge {
				markers = append(markers, key)
			} else {
				live = append(live, key+"="+op.String())
			}
		}
		// The parent and its three children, and the old key.
		if len(live) == 0 && len(markers) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("active set: %d keys not purged (%s), %d purged; want 0 and 5", len(live), strings.Join(live, " "), len(markers))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A finished run put back in the active set (here by an Adopt after its
// end; a retried spawn racing the child's end does the same) leaves it at
// its next activation, instead of being woken by every sweep for good.
func TestFinishedRunPutBackLeavesTheActiveSet(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	n, sess, run := threeChildrenDone(t, nc)
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "cairn_active")
	if err != nil {
		t.Fatal(err)
	}
	gone := func() bool {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := kv.Get(ctx, run); errors.Is(err, jetstream.ErrKeyNotFound) {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	if !gone() {
		t.Fatal("the finished run never left the active set")
	}
	if err := n.Adopt(ctx, sess, run); err != nil {
		t.Fatal(err)
	}
	if !gone() {
		t.Fatal("the finished run, put back in the active set, stayed there")
	}
	if st, _, err := n.Result(ctx, sess, run); err != nil || st != runtime.StatusCompleted {
		t.Fatalf("run %s, %v; want it completed as before", st, err)
	}
}

// threeChildrenDone starts a node on nc (closed when the test ends) and
// runs a planner with three children to its completion.
func threeChildrenDone(t *testing.T, nc *nats.Conn) (n *actors.Node, sess, run string) {
	t.Helper()
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{}}
	return h.finish(t, "Do three things.")
}

// A child that ends between track reading it running and track putting
// it in the active set (its end's purge lands first, track's write after)
// is taken out of the set again by the spawn, which finds it ended: a
// finished run never stays in the set, where only a full sweep or a
// restart would find it. The hook cancels the child at that moment and
// waits for its purge.
func TestChildEndingWhileTrackedLeavesTheActiveSet(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	js, _ := jetstream.New(nc)
	var n *actors.Node
	var child atomic.Value // string
	var once sync.Once
	clear := actors.SetTrackedHook(func(sess, run string) {
		once.Do(func() {
			child.Store(run)
			if _, err := n.Cancel(ctx, sess, run, "ended while tracked"); err != nil {
				t.Error(err)
				return
			}
			kv, err := js.KeyValue(ctx, "cairn_active")
			if err != nil {
				t.Error(err)
				return
			}
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if _, err := kv.Get(ctx, run); errors.Is(err, jetstream.ErrKeyNotFound) {
					return // the end's purge landed; track's write comes next
				}
			}
			t.Error("the cancelled child's end never purged its key")
		})
	})
	defer clear()
	parent := &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}
	h := &harness{nc: nc, parent: parent, child: childModel{g: &gate{}}}
	n = h.start(t)
	t.Cleanup(n.Close)
	sess, run, err := n.Run(ctx, "planner", "Spawn one.")
	if err != nil {
		t.Fatal(err)
	}
	result(t, n, sess, run)
	c, _ := child.Load().(string)
	if c == "" {
		t.Fatal("track never read a child running")
	}
	kv, err := js.KeyValue(ctx, "cairn_active")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, c); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the child that ended while tracked is still in the active set: %v %v", e, err)
	}
}
