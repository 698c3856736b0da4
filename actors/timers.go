package actors

import (
	"context"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// The node's timed work for its run actors, off their mailboxes: the
// deadline a parked run is woken at, and the end of a failed run.

// deadlineReadTimeout bounds the reads armDeadline makes: a read that
// hangs (NATS down) must not leave a parked run with no deadline armed.
const deadlineReadTimeout = 10 * time.Second

// armDeadline schedules a wake at the deadline of the wait the run parked
// on (wait, its call ID), or at its root's wall-clock deadline if that is
// earlier. Only that wait's: the run's earlier waits are over, and a
// deadline of theirs that has passed would wake the run at once, again at
// every park. The timer belongs to the node, not the actor, so the actor
// can be passivated while it waits; the deadlines are durable, so a
// restarted node arms them again when the run's first attempt parks. When
// they cannot be read, the run is woken again soon to read them anew: it
// must not sleep past them.
func (n *Node) armDeadline(memberCtx context.Context, sessionID, runID, wait string) {
	ctx, cancel := context.WithTimeout(memberCtx, deadlineReadTimeout)
	defer cancel()
	dl, err := n.waits.deadline(ctx, runID, wait)
	if err == nil {
		// The root's wall-clock budget ends a parked run too: wake it
		// then, and the attempt fails at once on the expired deadline.
		var rec *events.Run
		if rec, err = n.runlog.readRun(ctx, sessionID, runID); err == nil && rec != nil {
			var root time.Time
			if root, err = n.ledger.deadline(ctx, rec, nil); err == nil && !root.IsZero() && (dl.IsZero() || root.Before(dl)) {
				dl = root
			}
		}
	}
	if err != nil {
		if memberCtx.Err() != nil {
			return // the member stopped: the run's next owner arms it
		}
		n.logger.Warn("actors: read the deadlines of a parked run; reading them again shortly", "run", runID, "err", err)
		if retry := n.deadlines.now().Add(deadlineRetry); dl.IsZero() || retry.Before(dl) {
			dl = retry
		}
	}
	if !dl.IsZero() {
		n.wakeAt(sessionID, runID, dl)
	}
}

// deadlineRetry is how soon a parked run whose deadlines could not be read
// is woken to read them again.
const deadlineRetry = 5 * time.Second

// endFailed writes the end of a run that failed, trying again until it is
// written or ctx (the member's) ends: a failed run whose end is not in the
// log reads as running, and its parent is never told. A member that stops
// first leaves the run active, and its next owner resumes it, fails it
// again and writes the end.
func (n *Node) endFailed(ctx context.Context, sessionID, runID, reason string) {
	delay := 100 * time.Millisecond
	for {
		_, err := n.runlog.endRun(ctx, sessionID, runID, runtime.StatusFailed, reason)
		if err == nil || ctx.Err() != nil {
			return
		}
		n.logger.Warn("actors: write the end of a failed run; trying again", "run", runID, "in", delay, "err", err)
		t := n.cfg.Clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		delay = min(2*delay, 10*time.Second)
	}
}
