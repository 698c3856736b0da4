package actors

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/lru"
	"github.com/cairn-agents/cairn/runtime"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// D6 (decisions read current state): on replicated buckets, the reads a
// commit is decided on (a child's record, a budget entry, a wait's
// registration) go to the stream leader, never to a direct get that any
// replica may answer: a replica that is behind (a paused node's, just
// back) answered "not found" for a child its parent had spawned, and the
// parent committed that the call was not its child. A key that is not
// there, read from the leader, is not there.
func TestDecisionsReadTheStreamLeader(t *testing.T) {
	srvs := natstest.Cluster(t, 3)
	nc := natstest.Connect(t, srvs[0])
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket := func(name string) (jetstream.KeyValue, *kvBucket) {
		kv, err := js.CreateOrUpdateKeyValue(ctx, bucketConfig(name, 3))
		if err != nil {
			t.Fatal(err)
		}
		w, err := cjs.NewLog(ctx, nc, cjs.LogConfig{Stream: "KV_" + name, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		return kv, newKVBucket(w, name)
	}
	_, budgetsW := bucket("cairn_budgets")
	_, waitsW := bucket("cairn_waits")
	_, childrenW := bucket("cairn_children")

	// The node's own connection sees its requests too: after a flush,
	// every one it made is in reqs.
	reqs := make(chan *nats.Msg, 1000)
	sub, err := nc.ChanSubscribe("$JS.API.>", reqs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	now := func() time.Time { return time.Unix(1000, 0) }
	l := &ledger{w: budgetsW, now: now}
	if err := l.open(ctx, "root", runtime.Budget{Steps: 3, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if e, _, err := l.read(ctx, "root"); err != nil || e.Steps != 3 {
		t.Fatalf("budget: %+v, %v", e, err)
	}
	if _, _, err := l.read(ctx, "nobody"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a root with no entry: %v, want ErrKeyNotFound", err)
	}

	newWaits := func() *waits {
		return &waits{w: waitsW, now: now, known: lru.New[string, waitEntry](waitCacheItems, waitCacheBytes)}
	}
	if _, err := newWaits().register(ctx, "parent", "w", runtime.WaitRequest{CallIDs: []string{"a"}, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if dl, err := newWaits().deadline(ctx, "parent", "w"); err != nil || !dl.Equal(now().Add(time.Minute)) {
		t.Fatalf("wait deadline: %s, %v", dl, err)
	}
	if got, err := newWaits().register(ctx, "parent", "w", runtime.WaitRequest{CallIDs: []string{"b"}}); err != nil || got.IDs[0] != "a" {
		t.Fatalf("a repeated registration: %+v, %v; want the first", got, err)
	}

	c := &controller{n: &Node{childrenW: childrenW}, run: &events.Run{RunID: "parent", RootRunID: "root"}}
	v, _ := json.Marshal(child{CallID: "a", SessionID: "s1", RunID: "r1"})
	if _, err := childrenW.put(ctx, c.childKey("a"), v); err != nil {
		t.Fatal(err)
	}
	if ch, err := c.owned(ctx, "a"); err != nil || ch.RunID != "r1" {
		t.Fatalf("owned child: %+v, %v", ch, err)
	}
	var r rejection
	if _, err := c.owned(ctx, "nope"); !errors.As(err, &r) {
		t.Fatalf("a call that is no child: %v, want a rejection", err)
	}

	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var direct, leader []string
	for len(reqs) > 0 {
		m := <-reqs
		switch {
		case strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET.KV_"):
			direct = append(direct, m.Subject)
		case strings.HasPrefix(m.Subject, "$JS.API.STREAM.MSG.GET.KV_"):
			leader = append(leader, m.Subject)
		}
	}
	if len(direct) > 0 {
		t.Fatalf("direct gets, which any replica may answer: %v", direct)
	}
	if len(leader) < 6 {
		t.Fatalf("reads from the leader: %v, want one per read", leader)
	}
}
