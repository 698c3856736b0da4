package jetstream_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// counting charges a step per commit, as a run keeping its budget in its
// log reserves one per model-phase commit, and remembers what landed.
type counting struct{ landed []events.Ledger }

func (c *counting) Charge(_ *runtime.Checkpoint, last *events.Ledger) *events.Ledger {
	var t events.Ledger
	if last != nil {
		t = *last
	}
	t.Steps++
	return &t
}

func (c *counting) Charged(_ *runtime.Checkpoint, l *events.Ledger) { c.landed = append(c.landed, *l) }

// A run's commits carry the totals its charger gives them, as version 4
// commits, read back by a new handle (Ledger) and by the store
// (LastLedger). A run's first totals need a store that writes version 4;
// a run whose log holds them already goes on at any level (a member
// writes at level 1 for a while after it starts), and a commit without
// a charger carries none.
func TestCommitsCarryTheirRunsTotals(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	var level atomic.Int64
	level.Store(int64(events.LedgerVersion))
	s := newStore(t, nc, jetstream.Config{Schema: func() int { return int(level.Load()) }})
	open := func() *jetstream.RunStore {
		t.Helper()
		h, err := s.Open(ctx, "s1", "r1")
		if err != nil {
			t.Fatal(err)
		}
		return h.(*jetstream.RunStore)
	}
	save := func(h *jetstream.RunStore, rev int64) error {
		cp := &runtime.Checkpoint{Version: 1, Revision: rev, RunKey: "r1", Phase: runtime.PhaseModel,
			Append: []model.Message{model.TextMessage("m"+string(rune('0'+rev)), model.RoleUser, "go on")}}
		return h.SaveCheckpoint(ctx, cp)
	}

	// At level 3, a run with no totals yet is refused its first ones, and
	// nothing is written.
	level.Store(3)
	h := open()
	c := &counting{}
	h.SetLedger(c)
	if err := save(h, 1); err == nil || !strings.Contains(err.Error(), "schema version 4") {
		t.Fatalf("first totals at level 3: %v, want a refusal naming version 4", err)
	}
	if h.Revision() != 0 || len(c.landed) != 0 {
		t.Fatalf("revision %d, %d charges landed after a refusal", h.Revision(), len(c.landed))
	}
	// At level 4 they are written, as version 4 commits.
	level.Store(int64(events.LedgerVersion))
	for rev := int64(1); rev <= 2; rev++ {
		if err := save(h, rev); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.Ledger(); got == nil || got.Steps != 2 || len(c.landed) != 2 {
		t.Fatalf("ledger %+v, %d charges landed; want 2 steps, 2 charges", got, len(c.landed))
	}
	// A new handle reads them; at level 3 it goes on writing them.
	level.Store(3)
	h2 := open()
	if got := h2.Ledger(); got == nil || got.Steps != 2 {
		t.Fatalf("a new handle reads %+v, want 2 steps", got)
	}
	h2.SetLedger(&counting{})
	if err := save(h2, 3); err != nil {
		t.Fatalf("totals of a run that has them, at level 3: %v", err)
	}
	got, err := s.LastLedger(ctx, "s1", "r1")
	if err != nil || got == nil || got.Steps != 3 {
		t.Fatalf("LastLedger = %+v, %v; want 3 steps", got, err)
	}
	// Without a charger, a commit carries none.
	h2.SetLedger(nil)
	if err := save(h2, 4); err != nil {
		t.Fatal(err)
	}
	if got, err := s.LastLedger(ctx, "s1", "r1"); err != nil || got != nil {
		t.Fatalf("LastLedger after a commit with no charger = %+v, %v; want none", got, err)
	}
	if got, err := s.LastLedger(ctx, "s1", "nobody"); err != nil || got != nil {
		t.Fatalf("LastLedger of a run with no commit = %+v, %v", got, err)
	}
}
