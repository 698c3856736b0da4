package actors_test

import (
	"context"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// Readiness follows the first write that JetStream fails to store: while
// the log's stream alone refuses writes (as a disk with room for the
// probe's few bytes, and none for the log's, does), a start's failed write
// makes the node not ready at once, naming the stream, though the probe
// still lands; a write to the log that is stored makes it ready again.
// Before, the probe decided alone, and the node answered ready while
// every write to the log failed.
func TestReadinessFollowsFailedWrites(t *testing.T) {
	srv := natstest.Server(t)
	h := &harness{nc: natstest.Connect(t, srv), parent: threeChildren(), child: childModel{}}
	n := h.start(t)
	defer closeNode(t, n)
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, why := n.Ready(ctx)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready a minute after the start: %s", why)
		}
		time.Sleep(20 * time.Millisecond)
	}

	js, _ := njs.New(natstest.Connect(t, srv))
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	was := st.CachedInfo().Config
	full := was
	full.MaxBytes, full.Discard = 1, njs.DiscardNew // every message is larger: a full stream
	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Run(ctx, "planner", "Refused."); err == nil {
		t.Fatal("a run started while the log refuses writes")
	}
	ok, why := n.Ready(ctx)
	if ok || !strings.Contains(why, events.DefaultStream) {
		t.Fatalf("right after a write to the log failed: ready %v (%q), want not ready, naming %s", ok, why, events.DefaultStream)
	}

	if _, err := js.UpdateStream(ctx, was); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Run(ctx, "planner", "Stored."); err != nil {
		t.Fatal(err)
	}
	if ok, why := n.Ready(ctx); !ok {
		t.Fatalf("right after a write to the log was stored: not ready (%s)", why)
	}
}
