package actors_test

import (
	"context"
	"errors"
	"sort"
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
	// watch the set until they all landed.
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second) // a last resort: the watch ends it
	defer cancel()
	w, err := kv.WatchAll(wctx, jetstream.IncludeHistory())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	last := map[string]jetstream.KeyValueOp{}
	initial := true
	for {
		var live, markers []string
		for key, op := range last {
			if op == jetstream.KeyValuePurge {
				markers = append(markers, key)
			} else {
				live = append(live, key+"="+op.String())
			}
		}
		// The parent and its three children, and the old key.
		if !initial && len(live) == 0 && len(markers) == 5 {
			return
		}
		select {
		case e, ok := <-w.Updates():
			if !ok {
				t.Fatal("the watch of the active set ended")
			}
			if e == nil {
				initial = false
			} else {
				last[e.Key()] = e.Operation()
			}
		case <-wctx.Done():
			sort.Strings(live)
			t.Fatalf("active set: %d keys not purged (%s), %d purged; want 0 and 5", len(live), strings.Join(live, " "), len(markers))
		}
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
	if !awaitGone(t, kv, run) {
		t.Fatal("the finished run never left the active set")
	}
	if err := n.Adopt(ctx, sess, run); err != nil {
		t.Fatal(err)
	}
	if !awaitGone(t, kv, run) {
		t.Fatal("the finished run, put back in the active set, stayed there")
	}
	if st, _, err := n.Result(ctx, sess, run); err != nil || st != runtime.StatusCompleted {
		t.Fatalf("run %s, %v; want it completed as before", st, err)
	}
}

// awaitGone watches key until it is not in kv (never written, deleted or
// purged) and tells whether it got there.
func awaitGone(t *testing.T, kv jetstream.KeyValue, key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a last resort: the watch ends it
	defer cancel()
	w, err := kv.Watch(ctx, key)
	if err != nil {
		t.Error(err)
		return false
	}
	defer w.Stop()
	present, initial := false, true
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return false
			}
			if e == nil {
				initial = false
			} else {
				present = e.Operation() == jetstream.KeyValuePut
			}
			if !initial && !present {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
}

// threeChildrenDone starts a node on nc (closed when the test ends) and
// runs a planner with three children to its completion.
func threeChildrenDone(t *testing.T, nc *nats.Conn) (n *actors.Node, sess, run string) {
	t.Helper()
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{}, activeKV: true}
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
	tracked := func(sess, run string) {
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
			// The end's purge lands; track's write comes next.
			if !awaitGone(t, kv, run) {
				t.Error("the cancelled child's end never purged its key")
			}
		})
	}
	parent := &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a"]}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)),
	}}
	h := &harness{nc: nc, parent: parent, child: childModel{g: &gate{}}, hooks: actors.Hooks{Tracked: tracked}, activeKV: true}
	n = h.start(t)
	t.Cleanup(func() { closeNode(t, n) })
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
