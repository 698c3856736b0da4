package actors

import (
	"context"
	"fmt"

	"github.com/cairn-agents/cairn/actors/definition"
	"github.com/cairn-agents/cairn/actors/lifecycle"
)

// Adopt makes this node responsible for a root run whose record and
// commits were written outside the node (a fork made by
// projections/replay.Fork): it opens the run's budget as its agent defines
// it (a root the node created carries its own, fixed at its creation), marks the run active (so a restarted node resumes it too) and wakes
// it. Adopting a run the node already runs only wakes it again.
func (n *Node) Adopt(ctx context.Context, sessionID, runID string) error {
	rec, err := n.runlog.readRun(ctx, sessionID, runID)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("%w: run %s in session %s", ErrNotFound, runID, sessionID)
	}
	if rec.ParentRunID != "" || rec.RootRunID != rec.RunID {
		return fmt.Errorf("%w: run %s is not a root run", ErrInvalid, runID)
	}
	id, ok := n.versions.of(rec)
	if !ok {
		return fmt.Errorf("%w: agent %q is not deployed", ErrNotFound, rec.Agent)
	}
	ver, err := n.versions.get(ctx, id)
	if err != nil {
		return err
	}
	a, ok := ver.Agents[rec.Agent]
	if !ok {
		return fmt.Errorf("%w: agent %q is not in its definition version %s", ErrInvalid, rec.Agent, definition.Short(id))
	}
	if rec.Budget == nil { // a record written outside a node (a fork)
		if err := n.ledger.open(ctx, runID, a.Budget); err != nil {
			return err
		}
	}
	if err := n.markActive(ctx, sessionID, runID); err != nil {
		return err
	}
	n.wake(sessionID, runID, lifecycle.ReasonStarted)
	return nil
}
