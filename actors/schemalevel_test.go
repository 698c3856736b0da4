package actors_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// A node whose schema level is pinned writes nothing newer, even alone
// (a rollback to the build of that version stays possible), and purges
// nothing below the marker's version; unpinned, the same run writes
// commits of call changes (version 2) and records that name their
// definition version (events.DefinitionVersion). A level this build does
// not write is refused at start.
func TestSchemaLevelIsPinned(t *testing.T) {
	for _, tc := range []struct {
		level     int
		newest    int
		purgeable bool
	}{{1, 1, false}, {0, events.DefinitionVersion, true}} {
		nc := natstest.Connect(t, natstest.Server(t))
		h := &harness{nc: nc, parent: threeChildren(), child: childModel{}, schemaLevel: tc.level}
		n, _, _ := h.finish(t, "Do three things.")
		if got := newestVersion(t, nc); got != tc.newest {
			t.Errorf("level %d: the newest event is version %d, want %d", tc.level, got, tc.newest)
		}
		if got := n.PurgesWritable(); got != tc.purgeable {
			t.Errorf("level %d: PurgesWritable = %v, want %v", tc.level, got, tc.purgeable)
		}
		// Closed before the next case's node starts: two members live in
		// one process race inside protoactor-go and grpc (grpclog's global
		// logger; .ci/run).
		closeNode(t, n)
	}
	for _, bad := range []int{-1, events.SchemaVersion + 1} {
		_, err := actors.Start(context.Background(), actors.Config{Conn: natstest.Connect(t, natstest.Server(t)), SchemaLevel: bad})
		if err == nil {
			t.Errorf("Start with SchemaLevel %d succeeded", bad)
		}
	}
}

// newestVersion is the highest schema version of the log's events.
func newestVersion(t *testing.T, nc *nats.Conn) int {
	t.Helper()
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newest := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		e, err := events.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		newest = max(newest, e.Version)
	}
	return newest
}
