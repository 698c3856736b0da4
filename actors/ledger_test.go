package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/lru"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// C24: attempts that reserve from views of the entry that others made
// stale never overspend: a stale compare-and-set is fenced out, the entry
// read again, the limit checked on what is stored. Tokens recorded through
// a view land once.
// testBucket makes a KV bucket on a server of its own, as the node makes
// its buckets, and a kvWriter on it.
func testBucket(t *testing.T, bucket string) (jetstream.KeyValue, *kvBucket) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Server(t))
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	kv, err := js.CreateOrUpdateKeyValue(ctx, bucketConfig(bucket, 1))
	if err != nil {
		t.Fatal(err)
	}
	w, err := cjs.NewLog(ctx, nc, cjs.LogConfig{Stream: "KV_" + bucket})
	if err != nil {
		t.Fatal(err)
	}
	return kv, newKVBucket(w, bucket)
}

// testLedger is a ledger on a bucket of a server of its own.
func testLedger(t *testing.T, now func() time.Time) (*ledger, jetstream.KeyValue) {
	t.Helper()
	kv, w := testBucket(t, "cairn_budgets")
	return &ledger{w: w, now: now}, kv
}

func TestLedgerViewsNeverOverspend(t *testing.T) {
	ctx := context.Background()
	l, _ := testLedger(t, time.Now)
	if err := l.open(ctx, "root", runtime.Budget{Steps: 3}); err != nil {
		t.Fatal(err)
	}
	a, b := &budgetView{}, &budgetView{}
	for _, v := range []*budgetView{a, b} {
		if _, err := l.deadline(ctx, &events.Run{RunID: "root", RootRunID: "root"}, v); err != nil { // both seeded at the same revision
			t.Fatal(err)
		}
	}
	for i, v := range []*budgetView{a, b, a} { // b and then a reserve from stale views
		if err := l.reserve(ctx, "root", v); err != nil {
			t.Fatalf("reservation %d: %v", i+1, err)
		}
	}
	if err := (recorder{l: l, root: "root", view: b}).RecordUsage(ctx, model.PurposeStep, model.Usage{InputTokens: 7, OutputTokens: 5}); err != nil {
		t.Fatal(err)
	}
	if err := l.reserve(ctx, "root", b); !errors.Is(err, ErrBudget) {
		t.Fatalf("fourth reservation of 3 steps: %v, want ErrBudget", err)
	}
	e, err := l.usage(ctx, "root")
	if err != nil || e.UsedSteps != 3 || e.InputTokens != 7 || e.OutputTokens != 5 {
		t.Fatalf("entry %+v, %v; want 3 steps, 7+5 tokens", e, err)
	}
}

// C24, C34: a root run created with its budget in its record has no
// ledger entry until its first reservation, which creates it from the
// record. Two attempts that both found no entry (a duplicate activation)
// never create it twice or lose a step: the second creation is fenced out,
// reads the first's entry and reserves on it. The deadline is the
// record's.
func TestLedgerEntryCreatedByFirstReservation(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	l, kv := testLedger(t, func() time.Time { return now })
	rec := &events.Run{RunID: "root", RootRunID: "root", Budget: l.budgetOf(runtime.Budget{Steps: 2, Timeout: time.Hour})}
	child := &events.Run{RunID: "child", RootRunID: "root", ParentRunID: "root"}
	if _, err := l.deadline(ctx, child, &budgetView{}); err == nil {
		t.Fatal("a child's deadline read with no entry for its root: want an error")
	}
	a, b := &budgetView{}, &budgetView{}
	for _, v := range []*budgetView{a, b} {
		dl, err := l.deadline(ctx, rec, v)
		if err != nil || !dl.Equal(now.Add(time.Hour)) {
			t.Fatalf("deadline %s, %v; want the record's %s", dl, err, now.Add(time.Hour))
		}
	}
	if _, err := kv.Get(ctx, "root"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("an entry before the first reservation: %v", err)
	}
	for i, v := range []*budgetView{a, b} { // b's creation is fenced out by a's
		if err := l.reserve(ctx, "root", v); err != nil {
			t.Fatalf("reservation %d: %v", i+1, err)
		}
	}
	if err := l.reserve(ctx, "root", a); !errors.Is(err, ErrBudget) {
		t.Fatalf("third reservation of 2 steps: %v, want ErrBudget", err)
	}
	e, err := l.usage(ctx, "root")
	if err != nil || e.UsedSteps != 2 || e.Steps != 2 || e.Deadline != now.Add(time.Hour).UnixNano() {
		t.Fatalf("entry %+v, %v; want 2 of 2 steps and the record's deadline", e, err)
	}
	if dl, err := l.deadline(ctx, child, nil); err != nil || !dl.Equal(now.Add(time.Hour)) {
		t.Fatalf("child's deadline %s, %v", dl, err)
	}
}

// C28: a wait's deadline is fixed when it is first registered. The same
// wait registered again later (the run woken again on this node, or
// resumed on another node after a restart, with no cached registration)
// keeps the first deadline: a restart never extends a timeout; it is the
// one armed when the run parks on that wait.
func TestWaitKeepsItsFirstDeadline(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	_, w := testBucket(t, "cairn_waits")
	newWaits := func() *waits {
		return &waits{w: w, now: clock, known: lru.New[string, waitEntry](waitCacheItems, waitCacheBytes)}
	}
	req := runtime.WaitRequest{CallIDs: []string{"a"}, Mode: runtime.WaitAll, Timeout: time.Hour}
	first := now.Add(time.Hour).UnixNano()
	n1 := newWaits()
	if e, err := n1.register(ctx, "run", "w", req); err != nil || e.Deadline != first {
		t.Fatalf("first registration %+v, %v; want deadline %d", e, err, first)
	}
	now = now.Add(40 * time.Minute)
	for name, ws := range map[string]*waits{"same node": n1, "after a restart": newWaits()} {
		e, err := ws.register(ctx, "run", "w", req)
		if err != nil || e.Deadline != first {
			t.Fatalf("%s: registration %+v, %v; want the first deadline %d", name, e, err, first)
		}
		if dl, err := ws.deadline(ctx, "run", "w"); err != nil || dl.UnixNano() != first {
			t.Fatalf("%s: deadline %s, %v; want %s", name, dl, err, time.Unix(0, first))
		}
	}
}

// A step's response is recorded, and the attempt's next step reserved,
// in one write of the root's entry when the response goes on to another
// step and the budget affords it; the next BeforeModel then writes
// nothing, but still refuses a spent deadline or spent tokens. A response
// that completes, waits or is a compaction's reserves nothing ahead.
func TestLedgerReservesTheNextStepWithTheResponse(t *testing.T) {
	ctx := context.Background()
	u := model.Usage{InputTokens: 10, OutputTokens: 5}
	goesOn := &model.Response{Message: model.Message{Role: model.RoleAssistant, Parts: []model.Part{model.Call("c1", "run_js", `{}`)}}, Usage: u}
	completes := &model.Response{Message: model.Message{Role: model.RoleAssistant, Parts: []model.Part{model.Call("c2", "complete", `{}`)}}, Usage: u}
	waits := &model.Response{Message: model.Message{Role: model.RoleAssistant, Parts: []model.Part{model.Call("c3", "run_js", `{}`), model.Call("w", "wait_calls", `{}`)}}, Usage: u}
	nudged := &model.Response{Message: model.Message{Role: model.RoleAssistant, Parts: []model.Part{{Type: model.PartText, Text: "thinking"}}}, Usage: u}
	type op struct {
		do      string // reserve, or record a response: goes-on, completes, waits, nudged, compaction
		wantErr bool
	}
	for _, tc := range []struct {
		name       string
		budget     runtime.Budget
		ops        []op
		steps      int
		tokens     int64
		writes     uint64
		afterAhead time.Duration // the clock moves on after each response recorded
	}{
		{"two steps: three writes", runtime.Budget{Steps: 5}, []op{{"reserve", false}, {"goes-on", false}, {"reserve", false}, {"completes", false}}, 2, 30, 3, 0},
		{"a response with no call goes on", runtime.Budget{Steps: 5}, []op{{"reserve", false}, {"nudged", false}, {"reserve", false}}, 2, 15, 2, 0},
		{"a wait reserves nothing ahead", runtime.Budget{Steps: 5}, []op{{"reserve", false}, {"waits", false}, {"reserve", false}}, 2, 15, 3, 0},
		{"a compaction reserves nothing ahead", runtime.Budget{Steps: 5}, []op{{"reserve", false}, {"compaction", false}, {"reserve", false}}, 2, 15, 3, 0},
		{"the last step allowed is not reserved ahead", runtime.Budget{Steps: 1}, []op{{"reserve", false}, {"goes-on", false}, {"reserve", true}}, 1, 15, 2, 0},
		{"spent tokens: nothing ahead, and refused", runtime.Budget{Tokens: 15}, []op{{"reserve", false}, {"goes-on", false}, {"reserve", true}}, 1, 15, 2, 0},
		// Refused at the gate, the step reserved ahead is given back when
		// the attempt ends (refundAhead: the "end" op), in one write.
		{"a deadline that passed after the reservation ahead", runtime.Budget{Steps: 5, Timeout: time.Minute}, []op{{"reserve", false}, {"goes-on", false}, {"reserve", true}, {"end", false}}, 1, 15, 3, time.Hour},
		// Another run of the root spends the tokens between the
		// reservation ahead and the step: read again, and refused.
		{"tokens spent by another run of the root", runtime.Budget{Tokens: 100}, []op{{"reserve", false}, {"goes-on", false}, {"sibling", false}, {"reserve", true}, {"end", false}}, 1, 215, 4, 0},
		{"tokens left after another run's", runtime.Budget{Tokens: 1000}, []op{{"reserve", false}, {"goes-on", false}, {"sibling", false}, {"reserve", false}, {"end", false}}, 2, 215, 3, 0},
		{"an attempt that ends before its next step gives it back", runtime.Budget{Steps: 5}, []op{{"reserve", false}, {"goes-on", false}, {"end", false}}, 1, 15, 3, 0},
		// The first step reserved at the attempt's start (reserveEarly),
		// in parallel with its first commit: the writes are the same.
		{"reserved at the start: two steps, three writes", runtime.Budget{Steps: 5}, []op{{"early", false}, {"reserve", false}, {"goes-on", false}, {"reserve", false}, {"completes", false}, {"end", false}}, 2, 30, 3, 0},
		{"reserved at the start, no budget set", runtime.Budget{}, []op{{"early", false}, {"reserve", false}, {"completes", false}, {"end", false}}, 1, 15, 2, 0},
		{"reserved at the start, the attempt ends before its model step: given back", runtime.Budget{Steps: 5}, []op{{"early", false}, {"end", false}}, 0, 0, 2, 0},
		// A budget spent by an earlier attempt: the reservation at the start
		// is refused with no write, and the gate reports the refusal.
		{"a spent budget refuses the reservation at the start", runtime.Budget{Steps: 1}, []op{{"reserve", false}, {"goes-on", false}, {"attempt", false}, {"early", false}, {"reserve", true}, {"end", false}}, 1, 15, 2, 0},
		{"a passed deadline refuses the reservation at the start", runtime.Budget{Steps: 5, Timeout: time.Minute}, []op{{"later", false}, {"early", false}, {"reserve", true}, {"end", false}}, 0, 0, 0, 0},
		// The attempt cancelled as it starts: the reservation's write is not
		// cut off (its outcome would be unknown, a step taken neither spent
		// nor given back); it lands and the attempt's end gives it back.
		{"an attempt cancelled as it starts: reserved, then given back", runtime.Budget{Steps: 5}, []op{{"early-cancelled", false}, {"end", false}}, 0, 0, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			l, kv := testLedger(t, func() time.Time { return now })
			rec := &events.Run{RunID: "root", RootRunID: "root", Budget: l.budgetOf(tc.budget)}
			v := &budgetView{}
			if _, err := l.deadline(ctx, rec, v); err != nil {
				t.Fatal(err)
			}
			r := recorder{l: l, root: "root", view: v}
			for i, o := range tc.ops {
				var err error
				switch o.do {
				case "reserve":
					err = l.reserve(ctx, "root", v)
				case "early": // as Node.attempt, before the run loop starts
					l.reserveEarly(ctx, "root", v)
				case "early-cancelled":
					cctx, cancel := context.WithCancel(ctx)
					cancel()
					l.reserveEarly(cctx, "root", v)
				case "attempt": // the next attempt: a view of its own
					v = &budgetView{}
					if _, err = l.deadline(ctx, rec, v); err == nil {
						r.view = v
					}
				case "later":
					now = now.Add(time.Hour)
				case "compaction":
					err = r.RecordResponse(ctx, model.PurposeCompaction, goesOn)
				case "sibling":
					err = recorder{l: l, root: "root", view: &budgetView{}}.RecordUsage(ctx, model.PurposeStep, model.Usage{InputTokens: 200})
				case "end": // as Node.refundAhead
					err = l.giveBack(ctx, "root", v)
				default:
					resp := map[string]*model.Response{"goes-on": goesOn, "completes": completes, "waits": waits, "nudged": nudged}[o.do]
					err = r.RecordResponse(ctx, model.PurposeStep, resp)
					now = now.Add(tc.afterAhead)
				}
				if (err != nil) != o.wantErr || (err != nil && !errors.Is(err, ErrBudget)) {
					t.Fatalf("op %d (%s): %v, want an ErrBudget: %v", i, o.do, err, o.wantErr)
				}
			}
			e, err := l.usage(ctx, "root")
			if errors.Is(err, jetstream.ErrKeyNotFound) && tc.writes == 0 {
				e, err = budgetEntry{}, nil // never written: no entry
			}
			if err != nil || e.UsedSteps != tc.steps || e.InputTokens+e.OutputTokens != tc.tokens {
				t.Fatalf("entry %+v, %v; want %d steps and %d tokens", e, err, tc.steps, tc.tokens)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.(interface{ StreamInfo() *jetstream.StreamInfo }).StreamInfo().State.LastSeq; got != tc.writes {
				t.Fatalf("%d writes to the ledger, want %d", got, tc.writes)
			}
		})
	}
}
