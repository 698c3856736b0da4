package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/lru"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// ErrBudget is returned by BeforeModel when a root run's budget is spent:
// steps, tokens or wall-clock time (C24, C33, C35).
var ErrBudget = errors.New("actors: budget exhausted")

// ledger is the durable budget of root runs: one JetStream KV entry per
// root, updated with compare-and-set, so replicas and restarts never lose
// or double a reservation. Descendants draw on their root's entry. Reads
// and writes go through a kvWriter: reads from the stream leader (a
// budget decides whether a step may be taken), writes so that when many
// runs reserve at once they share atomic batches (group commit), and a
// lost acknowledgement is settled by Msg-Id instead of applied twice.
type ledger struct {
	// w writes the bucket and reads it from the stream leader (a KV Get
	// may be answered by a replica that is behind).
	w   *kvBucket
	now func() time.Time
}

type budgetEntry struct {
	Steps        int   `json:"steps_limit,omitempty"`
	Tokens       int64 `json:"tokens_limit,omitempty"`
	Deadline     int64 `json:"deadline_unix_nano,omitempty"`
	UsedSteps    int   `json:"steps"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// InLog marks the side entry of a root run that keeps its budget in
	// its log (inLog): it holds what the run's commits did not carry, and
	// the run's totals add its last commit's.
	InLog bool `json:"in_log,omitempty"`
}

// budgetOf fixes an agent's budget for a root run created now: the
// deadline counts from the creation, across restarts.
func (l *ledger) budgetOf(b runtime.Budget) *events.RunBudget {
	rb := &events.RunBudget{Steps: b.Steps, Tokens: b.Tokens}
	if b.Timeout > 0 {
		rb.Deadline = l.now().Add(b.Timeout).UnixNano()
	}
	return rb
}

func entryOf(b *events.RunBudget) budgetEntry {
	return budgetEntry{Steps: b.Steps, Tokens: b.Tokens, Deadline: b.Deadline}
}

// open creates a root's budget entry now; an existing one is kept. Roots
// the node creates carry their budget in their record instead, and their
// first reservation creates the entry (one write less per run); open is
// for runs whose record was written elsewhere (Adopt).
func (l *ledger) open(ctx context.Context, root string, b runtime.Budget) error {
	v, _ := json.Marshal(entryOf(l.budgetOf(b)))
	if _, err := l.w.create(ctx, root, v); err != nil && !errors.Is(err, runtime.ErrConflict) {
		return fmt.Errorf("actors: budget of %s: %w", root, err)
	}
	return nil
}

// budgetView is what one attempt last knew of its root's entry, from its
// own read or write: the next compare-and-set is tried at that revision
// without reading first. If anyone wrote since (a child, another attempt)
// the write is fenced out and the entry read again, so only the read is
// saved, never the check: at most one view per attempt, which writes its
// root's entry about once per model step (ledger.reserve, RecordResponse).
type budgetView struct {
	mu    sync.Mutex
	e     budgetEntry
	rev   uint64 // the entry's revision; 0 with known: no entry yet
	known bool
	// ahead: the attempt's next step is reserved already, by the write
	// that recorded the response before it (recorder.RecordResponse) or
	// by the one made at the attempt's start (ledger.reserveEarly).
	ahead bool
	// early is closed when the reservation made at the attempt's start
	// has settled (nil: none was made). Whoever reads or writes the view
	// after it was started waits for it first.
	early chan struct{}
}

// settle waits for the reservation made at the attempt's start, if any:
// until it is settled the view is its alone.
func (v *budgetView) settle(ctx context.Context) error {
	if v == nil || v.early == nil {
		return nil
	}
	select {
	case <-v.early:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reservedAhead sets ahead: the step after the response just recorded is
// reserved.
func (v *budgetView) reservedAhead() {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ahead = true
}

// takeAhead reports whether the attempt's next step was reserved ahead,
// and the entry as that write left it; the reservation is spent by asking.
func (v *budgetView) takeAhead() (budgetEntry, bool) {
	if v == nil {
		return budgetEntry{}, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	ahead := v.ahead
	v.ahead = false
	return v.e, ahead
}

// take returns what the view knows and forgets it: a write made from it
// either lands (and sets the view again) or is fenced out (and reads).
func (v *budgetView) take() (e budgetEntry, rev uint64, known bool) {
	if v == nil {
		return budgetEntry{}, 0, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e, rev, known = v.e, v.rev, v.known
	v.known = false
	return e, rev, known
}

// set records an entry at revision rev (0: the entry does not exist yet
// and e is what its creation will start from).
func (v *budgetView) set(e budgetEntry, rev uint64) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.e, v.rev, v.known = e, rev, true
}

// read returns a root's entry and its revision, read from the stream
// leader; an error wrapping jetstream.ErrKeyNotFound when it has none.
func (l *ledger) read(ctx context.Context, root string) (budgetEntry, uint64, error) {
	v, rev, found, err := l.w.get(ctx, root)
	if err == nil && !found {
		err = jetstream.ErrKeyNotFound
	}
	if err != nil {
		return budgetEntry{}, 0, fmt.Errorf("actors: budget of %s: %w", root, err)
	}
	var e budgetEntry
	if err := json.Unmarshal(v, &e); err != nil {
		return budgetEntry{}, 0, fmt.Errorf("actors: budget of %s: %w", root, err)
	}
	return e, rev, nil
}

// update applies f to a root's entry with compare-and-set, retrying on
// concurrent updates. With a view it starts from what the view knows.
// f may see an entry older than the stored one: others only add to an
// entry, so a limit f finds spent is spent.
func (l *ledger) update(ctx context.Context, root string, view *budgetView, f func(e *budgetEntry) error) (budgetEntry, error) {
	for {
		e, rev, known := view.take()
		if !known {
			var err error
			if e, rev, err = l.read(ctx, root); err != nil {
				return budgetEntry{}, err
			}
		}
		if err := f(&e); err != nil {
			return e, err
		}
		v, _ := json.Marshal(e)
		var seq uint64
		var err error
		if rev == 0 { // the root's first write creates its entry
			seq, err = l.w.create(ctx, root, v)
		} else {
			seq, err = l.w.update(ctx, root, v, rev)
		}
		if err == nil {
			view.set(e, seq)
			return e, nil
		}
		if !errors.Is(err, runtime.ErrConflict) {
			return budgetEntry{}, fmt.Errorf("actors: budget of %s: %w", root, err)
		}
		if ctx.Err() != nil {
			return budgetEntry{}, ctx.Err()
		}
	}
}

// reserve takes one step, or fails with ErrBudget. A step the view holds
// reserved ahead costs no write: the steps were counted by that write, and
// its other limits are checked again (the deadline may have passed since;
// the tokens, read again when the budget limits them, may have been spent
// by the root's other runs). One refused so stays reserved ahead, to be
// given back when the attempt ends.
func (l *ledger) reserve(ctx context.Context, root string, view *budgetView) error {
	if err := view.settle(ctx); err != nil {
		return fmt.Errorf("actors: budget of %s: %w", root, err)
	}
	if e, ahead := view.takeAhead(); ahead {
		if e.Tokens > 0 {
			// Others drawing on the root (its descendants) may have spent
			// tokens since: a read, where a reservation's compare-and-set
			// would have been refused and read again.
			fresh, rev, err := l.read(ctx, root)
			if err != nil {
				view.reservedAhead() // not taken: given back at the attempt's end
				return err
			}
			view.set(fresh, rev)
			e = fresh
		}
		if err := l.affords(e, false); err != nil {
			view.reservedAhead() // refused at the gate, not taken: given back at the attempt's end
			return err
		}
		return nil
	}
	_, err := l.update(ctx, root, view, l.takeStep)
	return err
}

// takeStep counts one more step on e, or fails with ErrBudget.
func (l *ledger) takeStep(e *budgetEntry) error {
	if err := l.affords(*e, true); err != nil {
		return err
	}
	e.UsedSteps++
	return nil
}

// reserveEarly reserves an attempt's first model step at its start, in
// parallel with the attempt's first commit (a fresh run's revision 1),
// instead of after it: one write less on the path of a run's first
// response. It is a reservation ahead like RecordResponse's: BeforeModel
// spends it (C35: the loop's order is unchanged, and the step is reserved
// before any work of it), an attempt that ends before its model step
// gives it back, and a crash leaves it spent. One the budget refuses, or
// whose write fails, reserves nothing: BeforeModel then reserves on its
// own and reports the refusal (C24). Call it once, before the attempt
// runs; the view is the reservation's alone until it settles.
//
// The write is not cancelled with the attempt (a cancel, its root's
// deadline, a drain cut short): cut off, its outcome would be unknown, and
// a step it did take would be neither spent nor given back. Bounded by
// earlyTimeout instead, it settles; the attempt's end waits for it and
// gives the step back if no model step took it.
func (l *ledger) reserveEarly(ctx context.Context, root string, view *budgetView) {
	view.early = make(chan struct{})
	view.mu.Lock()
	e0, rev0, known0 := view.e, view.rev, view.known
	view.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), earlyTimeout)
	go func() {
		defer close(view.early)
		defer cancel()
		_, err := l.update(ctx, root, view, l.takeStep)
		if err == nil {
			view.reservedAhead()
			return
		}
		// Refused or failed, it leaves the view as it found it: a root
		// with no entry yet is known only from its record's budget, which
		// the gate's own reservation then creates the entry from.
		view.mu.Lock()
		if !view.known && known0 {
			view.e, view.rev, view.known = e0, rev0, true
		}
		view.mu.Unlock()
	}()
}

// earlyTimeout bounds the write of a reservation made at an attempt's
// start (reserveEarly).
const earlyTimeout = 10 * time.Second

// giveBack gives back the step an attempt that ended holds reserved ahead,
// if any, once the reservation made at its start has settled (it waits
// for that, bounded by earlyTimeout; ctx bounds the refund).
func (l *ledger) giveBack(ctx context.Context, root string, view *budgetView) error {
	_ = view.settle(context.Background()) // fails only when its context ends
	if _, ahead := view.takeAhead(); !ahead {
		return nil
	}
	return l.refund(ctx, root, view)
}

// refund gives back one step reserved and not taken.
func (l *ledger) refund(ctx context.Context, root string, view *budgetView) error {
	_, err := l.update(ctx, root, view, func(e *budgetEntry) error {
		if e.UsedSteps > 0 {
			e.UsedSteps--
		}
		return nil
	})
	return err
}

// affords reports, as an ErrBudget, a limit of e that is spent: its
// deadline, its tokens, and its steps when one more is to be taken.
func (l *ledger) affords(e budgetEntry, step bool) error {
	switch {
	case e.Deadline > 0 && l.now().UnixNano() >= e.Deadline:
		return fmt.Errorf("%w: wall-clock deadline %s passed", ErrBudget, time.Unix(0, e.Deadline).UTC().Format(time.RFC3339))
	case step && e.Steps > 0 && e.UsedSteps >= e.Steps:
		return fmt.Errorf("%w: %d of %d steps used", ErrBudget, e.UsedSteps, e.Steps)
	case e.Tokens > 0 && e.InputTokens+e.OutputTokens >= e.Tokens:
		return fmt.Errorf("%w: %d of %d tokens used", ErrBudget, e.InputTokens+e.OutputTokens, e.Tokens)
	}
	return nil
}

// deadline returns the wall-clock deadline of run's root (zero when none);
// the entry read seeds view, when given. A root whose first reservation
// has not been made yet has no entry: its record's budget stands for it.
func (l *ledger) deadline(ctx context.Context, run *events.Run, view *budgetView) (time.Time, error) {
	e, rev, err := l.read(ctx, run.RootRunID)
	if errors.Is(err, jetstream.ErrKeyNotFound) && run.RootRunID == run.RunID && run.Budget != nil {
		e, rev, err = entryOf(run.Budget), 0, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	view.set(e, rev)
	if e.Deadline == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, e.Deadline), nil
}

// deadlineAsync reads what deadline does, beside the caller's own reads:
// the returned function waits for it.
func (l *ledger) deadlineAsync(ctx context.Context, run *events.Run, view *budgetView) func() (time.Time, error) {
	var dl time.Time
	var err error
	read := make(chan struct{})
	go func() {
		defer close(read)
		dl, err = l.deadline(ctx, run, view)
	}()
	return func() (time.Time, error) {
		<-read
		return dl, err
	}
}

// usage returns a root's totals.
func (l *ledger) usage(ctx context.Context, root string) (budgetEntry, error) {
	e, _, err := l.read(ctx, root)
	return e, err
}

// recorder records reported tokens against a root (C34).
type recorder struct {
	l    *ledger
	root string
	view *budgetView
	// inLog, when set, is the root's budget kept in its log: tokens are
	// charged by the attempt's next write instead.
	inLog *inLog
}

func (r recorder) RecordUsage(ctx context.Context, _ model.Purpose, u model.Usage) error {
	if r.inLog != nil {
		r.inLog.record(u)
		return nil
	}
	_, err := r.l.update(ctx, r.root, r.view, func(e *budgetEntry) error {
		e.InputTokens += u.InputTokens
		e.OutputTokens += u.OutputTokens
		return nil
	})
	return err
}

// RecordResponse records a step's response's tokens and, in the same
// write, reserves the attempt's next step when the response goes on to
// one (see goesOn) and the budget affords it, so a model step costs the
// ledger one write, not two. The reservation is durable before any work
// of the step it pays for (C24); the loop still saves that step's model
// checkpoint and calls BeforeModel (C35), which spends it. A reservation
// ahead that the attempt does not spend (it was drained, failed or lost
// its lease before its next step) is given back when the attempt ends
// (Node.refundAhead); after a crash it stays spent, as a crash after any
// reservation does, and the next attempt reserves again. When the budget
// does not afford a next step, the tokens alone are recorded and
// BeforeModel refuses it as before.
func (r recorder) RecordResponse(ctx context.Context, purpose model.Purpose, resp *model.Response) error {
	if r.inLog != nil {
		r.inLog.record(resp.Usage) // the response's commit charges them
		return nil
	}
	next := purpose == model.PurposeStep && goesOn(resp)
	var ahead bool
	_, err := r.l.update(ctx, r.root, r.view, func(e *budgetEntry) error {
		e.InputTokens += resp.Usage.InputTokens
		e.OutputTokens += resp.Usage.OutputTokens
		ahead = next && r.l.affords(*e, true) == nil
		if ahead {
			e.UsedSteps++
		}
		return nil
	})
	if err == nil && ahead {
		r.view.reservedAhead()
	}
	return err
}

// goesOn reports whether the attempt that committed resp takes another
// model step after its calls: not when it calls complete (the run ends)
// or wait_calls (it may park, and a later attempt reserves for itself).
func goesOn(resp *model.Response) bool {
	for _, c := range resp.Message.ToolCalls() {
		if c.Name == runtime.ToolComplete || c.Name == runtime.ToolWait {
			return false
		}
	}
	return true
}

// waits keeps each wait_calls registration: its dependencies and its
// original deadline, created once per tool call (C28).
type waits struct {
	// w creates registrations (batched with the node's other writes) and
	// reads them from the stream leader.
	w   *kvBucket
	now func() time.Time
	// known caches registrations (created once, never changed): a parked
	// run woken again registers the same wait again, and reads it here.
	known *lru.Cache[string, waitEntry]
}

// Bounds of the registration cache.
const (
	waitCacheItems = 4096
	waitCacheBytes = 4 << 20
)

type waitEntry struct {
	IDs      []string         `json:"ids"`
	Mode     runtime.WaitMode `json:"mode"`
	Deadline int64            `json:"deadline_unix_nano,omitempty"`
}

func waitKey(runID, callID string) string { return runID + "." + keyOf(callID) }

// register stores the wait of a tool call, or returns the stored one: a
// repeated Wait keeps the original deadline.
func (w *waits) register(ctx context.Context, runID, callID string, req runtime.WaitRequest) (waitEntry, error) {
	e := waitEntry{IDs: req.CallIDs, Mode: req.Mode}
	if req.Timeout > 0 {
		e.Deadline = w.now().Add(req.Timeout).UnixNano()
	}
	v, _ := json.Marshal(e)
	key := waitKey(runID, callID)
	if stored, ok := w.known.Get(key); ok {
		return stored, nil
	}
	_, err := w.w.create(ctx, key, v)
	if err == nil {
		w.known.Add(key, e, len(key)+len(v))
		return e, nil
	}
	if !errors.Is(err, runtime.ErrConflict) {
		return waitEntry{}, fmt.Errorf("actors: register wait: %w", err)
	}
	// Registered before: the stored one stands (read from the leader: the
	// create that refused this one is on it).
	v, _, found, err := w.w.get(ctx, key)
	if err == nil && !found {
		err = fmt.Errorf("%w: the create was refused and the key has no value", jetstream.ErrKeyNotFound)
	}
	if err != nil {
		return waitEntry{}, fmt.Errorf("actors: read wait: %w", err)
	}
	var stored waitEntry
	if err := json.Unmarshal(v, &stored); err != nil {
		return waitEntry{}, fmt.Errorf("actors: read wait: %w", err)
	}
	w.known.Add(key, stored, len(key)+len(v))
	return stored, nil
}

// deadline returns the deadline of the run's wait callID (zero when it has
// none, or is not registered), from the registration cache when it is
// there (the attempt that parked just registered it).
func (w *waits) deadline(ctx context.Context, runID, callID string) (time.Time, error) {
	if callID == "" {
		return time.Time{}, nil
	}
	key := waitKey(runID, callID)
	e, ok := w.known.Get(key)
	if !ok {
		v, _, found, err := w.w.get(ctx, key)
		if err != nil {
			return time.Time{}, fmt.Errorf("actors: read wait %s of %s: %w", callID, runID, err)
		}
		if !found { // read from the leader: not registered
			return time.Time{}, nil
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return time.Time{}, fmt.Errorf("actors: read wait %s of %s: %w", callID, runID, err)
		}
		w.known.Add(key, e, len(key)+len(v))
	}
	if e.Deadline == 0 {
		return time.Time{}, nil
	}
	return time.Unix(0, e.Deadline), nil
}
