package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// logMsgs reads every message of the log, in order.
func logMsgs(t *testing.T, js njs.JetStream) []*njs.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*njs.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// listed reads every checkpoint event of run r in session s and returns
// how many used call IDs each lists, and whether it has a base.
func listed(t *testing.T, js njs.JetStream, s, r string) (counts []int, based []bool) {
	t.Helper()
	for _, m := range logMsgs(t, js) {
		if !events.SubjectMatches(events.RunCheckpoints(s, r), m.Subject) {
			continue
		}
		e, err := events.Decode(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var p events.Checkpoint
		if err := e.Payload(&p); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, len(p.Checkpoint.UsedCallIDs))
		based = append(based, p.UsedCallIDsBase > 0)
	}
	return counts, based
}

// A revision lists the call IDs used since the last full listing, at most
// 64 of them, where every revision used to list every ID the run had used:
// a run of n calls wrote O(n²) IDs. A log an earlier build wrote (every
// revision a full listing) loads whole, and the revisions written after it
// are based on its last event.
func TestUsedCallIDsListedOnABase(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, nc, jetstream.Config{})
	js, _ := njs.New(nc)
	h, err := s.Open(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	const legacy, revs = 50, 400
	for rev := int64(1); rev <= revs; rev++ {
		used = append(used, fmt.Sprintf("toolu_01%026d", 3*rev), fmt.Sprintf("toolu_01%026d", 3*rev+1), fmt.Sprintf("toolu_01%026d", 3*rev+2))
		if rev <= legacy {
			jetstream.ForgetUsedCallIDsBase(h.(*jetstream.RunStore))
		}
		c := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseModel,
			UsedCallIDs: append([]string(nil), used...)}
		if err := h.SaveCheckpoint(ctx, c); err != nil {
			t.Fatal(err)
		}
		if rev == legacy+1 { // a new attempt on a log of full listings
			if h, err = s.Open(ctx, "s", "r"); err != nil {
				t.Fatal(err)
			}
		}
	}
	counts, based := listed(t, js, "s", "r")
	if len(counts) != revs {
		t.Fatalf("%d checkpoint events, want %d", len(counts), revs)
	}
	total := 0
	for i, n := range counts {
		total += n
		switch {
		case i < legacy && (based[i] || n != 3*(i+1)):
			t.Fatalf("legacy revision %d lists %d IDs (based: %v), want all %d", i+1, n, based[i], 3*(i+1))
		case i >= legacy && based[i] && n > 64:
			t.Fatalf("revision %d lists %d IDs on its base, want at most 64", i+1, n)
		}
	}
	if i := legacy; !based[i] {
		t.Fatalf("revision %d, the first after the legacy log, lists everything again instead of building on revision %d", i+1, i)
	}
	// A full listing every 64 IDs (about 21 revisions here): far below
	// the n²/2 of listing everything every time.
	if all := 3 * revs * (revs + 1) / 2; total > all/8 {
		t.Fatalf("%d IDs listed in all, want under %d (every revision listing all: %d)", total, all/8, all)
	}
	wantUsed(t, s, used)
	last, err := s.LastCheckpoint(ctx, events.RunCheckpoints("s", "r"))
	if err != nil || last.Revision != revs || strings.Join(last.UsedCallIDs, ",") != strings.Join(used, ",") {
		t.Fatalf("LastCheckpoint: %v; want revision %d with every used call ID", err, revs)
	}
}

// In a copy of the log whose sequences differ (sourced, or restored into
// a stream that had other messages first), a revision's base is found by
// its revision among the run's checkpoints: the run loads whole, whether
// the base's old sequence now holds another checkpoint of the run (40
// revisions) or another event altogether (20: the run's lease).
func TestUsedCallIDsBaseInACopy(t *testing.T) {
	for _, revs := range []int64{40, 20} {
		t.Run(fmt.Sprint(revs), func(t *testing.T) { usedCallIDsInACopy(t, revs) })
	}
}

func usedCallIDsInACopy(t *testing.T, revs int64) {
	ctx := context.Background()
	src := natstest.Connect(t, natstest.Server(t))
	s := newStore(t, src, jetstream.Config{})
	h, err := s.Open(ctx, "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for rev := int64(1); rev <= revs; rev++ {
		used = append(used, fmt.Sprintf("c%d-a", rev), fmt.Sprintf("c%d-b", rev))
		c := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseModel,
			UsedCallIDs: append([]string(nil), used...)}
		if err := h.SaveCheckpoint(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	wantUsed(t, copyLog(t, src, 1), used)
}

// copyLog copies the log of the server src is connected to into a new
// server's, after shift other messages: every sequence differs by shift.
// It returns a store on the copy.
func copyLog(t *testing.T, src *nats.Conn, shift int) *jetstream.Store {
	t.Helper()
	ctx := context.Background()
	dst := natstest.Connect(t, natstest.Server(t))
	newStore(t, dst, jetstream.Config{}) // the stream, empty
	js, _ := njs.New(src)
	djs, _ := njs.New(dst)
	for range shift {
		if _, err := djs.Publish(ctx, events.RunLease("other", "o"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range logMsgs(t, js) {
		for k := range m.Header {
			// The writer's fences were for its own log, and a direct get
			// adds the message's stream, sequence, subject and time.
			if strings.HasPrefix(k, "Nats-") && k != "Nats-Msg-Id" {
				m.Header.Del(k)
			}
		}
		if _, err := djs.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
	return newStore(t, dst, jetstream.Config{})
}

// wantUsed opens run r of session s, as a new attempt does, and wants its
// checkpoint to have used exactly used, in order.
func wantUsed(t *testing.T, s *jetstream.Store, used []string) {
	t.Helper()
	h, err := s.Open(context.Background(), "s", "r")
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.LoadCheckpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.UsedCallIDs, ",") != strings.Join(used, ",") {
		t.Fatalf("loaded %d used call IDs, want %d in order: %v", len(got.UsedCallIDs), len(used), got.UsedCallIDs)
	}
}
