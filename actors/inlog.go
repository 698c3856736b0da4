package actors

import (
	"context"
	"fmt"
	"sync"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// inLog is the budget of a root run that nothing else draws on (its agent
// has no subagents, so it has no descendants), for one attempt. Its totals
// ride in the run's own checkpoint commits (events.Checkpoint.Ledger, each
// commit carrying the totals after it), so in steady state a model step
// costs the budget no write of its own:
//
//   - a commit that leaves the run in the model phase (revision 1, a
//     call's result that ends a response's calls, a response with no
//     calls) reserves the next step in the same write, when the budget
//     affords it: the reservation is durable before any work of that
//     step, as C24 asks, and the loop's order is unchanged (C35: the
//     model checkpoint, then BeforeModel, which spends the reservation
//     with no write, checking the deadline and the tokens again);
//   - the tokens a response reported are charged by the commit of that
//     response (the model wrapper reports them just before it).
//
// What no commit carries is written to the run's entry in the budgets
// bucket, marked in_log, as a side entry: a reservation BeforeModel makes
// itself (an attempt resumed in the model phase, the step after a
// compaction's request), the tokens of compaction and failed requests,
// and a step reserved ahead and given back when the attempt ends without
// taking it. The run's totals are the sum of its last commit's and its
// side entry's. One attempt holds the run's lease at a time, so nobody
// else charges the commits; the side entry is updated by compare-and-set,
// so an attempt fenced out that gives back its step late adds to what the
// next attempt wrote instead of overwriting it (the step was not taken:
// giving it back is right). The attempt checks its budget against the
// side entry as it last read or wrote it: what a fenced-out attempt wrote
// since is seen at its next side write.
//
// The limit: tokens reported are held by the node until the attempt's
// next write (the response's commit, the next step's side reservation
// after a compaction, the attempt's end after a failed request): a
// process that dies before it loses them; the step is counted.
type inLog struct {
	l      *ledger
	root   string
	limits budgetEntry // the run record's: steps, tokens, deadline
	side   *budgetView // the side entry, as the attempt knows it

	mu sync.Mutex
	// commits is what the committed checkpoint carries.
	commits events.Ledger
	// pending is the tokens reported and not written yet; charging is the
	// part of it the commit in flight carries, and reserving whether it
	// reserves the next step.
	pending, charging model.Usage
	reserving         bool
	// ahead: the committed checkpoint reserved the next step, and no
	// model request has taken it.
	ahead bool
}

var _ cjs.Charger = (*inLog)(nil)

// keepsInLog reports whether an attempt of rec keeps its budget in the
// log (inLog): a root run whose agent has no subagents and whose record
// holds its budget, when its log already does so, or, for a run with no
// commit yet, when the cluster writes the log's version that carries
// totals and no earlier attempt charged the budgets bucket as a whole
// entry. side is the root's entry as the attempt read it (or the record's
// budget with no entry).
func keepsInLog(rec *events.Run, a *Agent, rs *cjs.RunStore, writeVersion int, side *budgetView) bool {
	if rec.RootRunID != rec.RunID || rec.Budget == nil || len(a.Definition.Subagents) > 0 {
		return false
	}
	if rs.Revision() > 0 {
		return rs.Ledger() != nil
	}
	if writeVersion < events.LedgerVersion {
		return false
	}
	side.mu.Lock()
	defer side.mu.Unlock()
	return !side.known || side.rev == 0 || side.e.InLog
}

// newInLog starts an attempt's budget kept in the log of rs, and makes
// rs's commits carry it.
func newInLog(l *ledger, rec *events.Run, rs *cjs.RunStore, side *budgetView) *inLog {
	b := &inLog{l: l, root: rec.RootRunID, limits: entryOf(rec.Budget), side: side}
	if c := rs.Ledger(); c != nil {
		b.commits = *c
	}
	rs.SetLedger(b)
	return b
}

// total is the run's totals: the commits', the side entry's and the
// tokens pending, under the record's limits.
func (b *inLog) total(commits events.Ledger, side budgetEntry, pending model.Usage) budgetEntry {
	e := b.limits
	e.UsedSteps = commits.Steps + side.UsedSteps
	e.InputTokens = commits.InputTokens + side.InputTokens + pending.InputTokens
	e.OutputTokens = commits.OutputTokens + side.OutputTokens + pending.OutputTokens
	return e
}

// sideEntry is the side entry as the attempt knows it.
func (b *inLog) sideEntry() budgetEntry {
	b.side.mu.Lock()
	defer b.side.mu.Unlock()
	return b.side.e
}

// Charge implements cjs.Charger: the commit of cp carries the tokens
// pending and, when it leaves the run in the model phase, the next step
// reserved if the budget affords it.
func (b *inLog) Charge(cp *runtime.Checkpoint, last *events.Ledger) *events.Ledger {
	side := b.sideEntry()
	b.mu.Lock()
	defer b.mu.Unlock()
	var t events.Ledger
	if last != nil {
		t = *last
	}
	b.charging = b.pending
	t.InputTokens += b.charging.InputTokens
	t.OutputTokens += b.charging.OutputTokens
	b.reserving = cp.Reply == nil && cp.Phase == runtime.PhaseModel &&
		b.l.affords(b.total(t, side, model.Usage{}), true) == nil
	if b.reserving {
		t.Steps++
	}
	return &t
}

// Charged implements cjs.Charger.
func (b *inLog) Charged(_ *runtime.Checkpoint, l *events.Ledger) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.commits = *l
	b.pending.InputTokens -= b.charging.InputTokens
	b.pending.OutputTokens -= b.charging.OutputTokens
	b.charging = model.Usage{}
	b.ahead, b.reserving = b.reserving, false
}

// record adds reported tokens to the next write (C34).
func (b *inLog) record(u model.Usage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending.InputTokens += u.InputTokens
	b.pending.OutputTokens += u.OutputTokens
}

// reserve is BeforeModel (C24, C35): it spends the step the committed
// checkpoint reserved, with no write, or reserves one on the side entry,
// with the tokens pending, or fails with ErrBudget.
func (b *inLog) reserve(ctx context.Context) error {
	b.mu.Lock()
	ahead, commits, pending := b.ahead, b.commits, b.pending
	b.ahead = false
	b.mu.Unlock()
	if ahead {
		if err := b.l.affords(b.total(commits, b.sideEntry(), pending), false); err != nil {
			b.mu.Lock()
			b.ahead = true // refused at the gate, not taken: given back at the attempt's end
			b.mu.Unlock()
			return err
		}
		return nil
	}
	_, err := b.l.update(ctx, b.root, b.side, func(e *budgetEntry) error {
		if err := b.l.affords(b.total(commits, *e, pending), true); err != nil {
			return err
		}
		e.UsedSteps++
		e.InputTokens += pending.InputTokens
		e.OutputTokens += pending.OutputTokens
		e.InLog = true
		return nil
	})
	if err == nil {
		b.settled(pending)
	}
	return err
}

// settled takes written tokens off those pending.
func (b *inLog) settled(u model.Usage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending.InputTokens -= u.InputTokens
	b.pending.OutputTokens -= u.OutputTokens
}

// end settles the attempt's budget when it ends: a step reserved ahead
// and not taken is given back, tokens no write carried are charged, both
// on the side entry in one write (none when there is neither). A crash
// leaves the step spent, as a crash after any reservation does (C35).
//
// After a commit whose write failed with its outcome unknown (the store
// could not settle a lost acknowledgement), the tokens it carried are
// charged here too, and a step it may have reserved is not given back:
// counted twice, perhaps, never lost.
func (b *inLog) end(ctx context.Context) error {
	b.mu.Lock()
	ahead, pending := b.ahead, b.pending
	b.ahead, b.pending = false, model.Usage{}
	b.mu.Unlock()
	if !ahead && pending.InputTokens == 0 && pending.OutputTokens == 0 {
		return nil
	}
	_, err := b.l.update(ctx, b.root, b.side, func(e *budgetEntry) error {
		if ahead {
			e.UsedSteps-- // the commits' reservation, given back here
		}
		e.InputTokens += pending.InputTokens
		e.OutputTokens += pending.OutputTokens
		e.InLog = true
		return nil
	})
	return err
}

// usageInLog is the totals of a root run that keeps its budget in its
// log: its last commit's and its side entry's (side: nil when it has
// none). ok is false when the run's log keeps none (and no side entry
// says it will: a run that has not committed since its side entry was
// written).
func (n *Node) usageInLog(ctx context.Context, rec *events.Run, side *budgetEntry) (e budgetEntry, ok bool, err error) {
	c, err := n.store.LastLedger(ctx, rec.SessionID, rec.RunID)
	if err != nil {
		return budgetEntry{}, false, fmt.Errorf("actors: budget of %s: %w", rec.RunID, err)
	}
	if c == nil && (side == nil || !side.InLog) {
		return budgetEntry{}, false, nil
	}
	if c != nil {
		e.UsedSteps, e.InputTokens, e.OutputTokens = c.Steps, c.InputTokens, c.OutputTokens
	}
	if side != nil {
		e.UsedSteps += side.UsedSteps
		e.InputTokens += side.InputTokens
		e.OutputTokens += side.OutputTokens
	}
	return e, true, nil
}
