package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/session"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// ForkOptions configure a fork.
type ForkOptions struct {
	// SessionID and RunID name the new session and run; both required, and
	// the session must be new.
	SessionID, RunID string
	// At is the revision to fork from: the new run starts with the
	// original's commits 1..At and resumes from there.
	At int64
	// ContractHash, when set, replaces the contract hash of the copied
	// checkpoints: the fork then resumes under another definition version
	// (ContractHash computes it). Empty keeps the original contract.
	ContractHash string
	// Agent, when set, replaces the agent slug of the run record (a new
	// version deployed under another slug).
	Agent string
}

// ErrForkInput is returned for fork options that cannot make a fork.
var ErrForkInput = errors.New("replay: bad fork")

// Fork starts a new run in a new session from revision At of h's run. The
// new session begins with one compaction holding the original session's
// window as it was before the run started (a continuation's history), then
// the original run's commits and compactions up to At, written through
// store under the new run's own lease. The new run record names its origin
// (ForkedFrom, ForkedAt). The original session is only read. A node then
// resumes the fork like any run, with whatever model it is configured with.
func Fork(ctx context.Context, store *cjs.Store, h *History, o ForkOptions) (events.Run, error) {
	if err := events.ValidID(o.SessionID); err != nil {
		return events.Run{}, fmt.Errorf("%w: session: %v", ErrForkInput, err)
	}
	if err := events.ValidID(o.RunID); err != nil {
		return events.Run{}, fmt.Errorf("%w: run: %v", ErrForkInput, err)
	}
	if o.SessionID == h.SessionID {
		return events.Run{}, fmt.Errorf("%w: session: a fork needs a new session, not %s", ErrForkInput, o.SessionID)
	}
	at, err := h.Revision(o.At)
	if err != nil {
		return events.Run{}, fmt.Errorf("%w: at: %w", ErrForkInput, err)
	}
	if at.Checkpoint.Reply != nil {
		return events.Run{}, fmt.Errorf("%w: at: revision %d is the completed one; fork an earlier revision", ErrForkInput, o.At)
	}
	rec := events.Run{RunID: o.RunID, SessionID: o.SessionID, Agent: h.Run.Agent, Message: h.Run.Message, RootRunID: o.RunID,
		Owner: h.Run.Owner, ForkedFrom: h.RunID, ForkedAt: o.At}
	if o.Agent != "" {
		rec.Agent = o.Agent
	}
	if o.ContractHash == "" && o.Agent == "" {
		// The same contract: the fork resumes under the original's
		// pinned definition, as the original would. Onto another
		// definition, the record names none and the agent's current one
		// applies.
		rec.Definition = h.Run.Definition
	}
	if rec.Message == "" && len(h.Commits) > 0 && len(h.Commits[0].Checkpoint.Append) > 0 {
		rec.Message = h.Commits[0].Checkpoint.Append[0].Text()
	}
	// Expected last sequence 0 on the whole session: the session is new.
	// Through the store's CreateRun, as a node creates runs: a lost
	// acknowledgement is settled from the log, not reported as a failure
	// of a fork that was written.
	switch _, err := store.CreateRun(ctx, rec, 0, h.Commits[0].Time); {
	case errors.Is(err, cjs.ErrRunExists):
		return events.Run{}, fmt.Errorf("%w: run: %s already exists in session %s", ErrForkInput, o.RunID, o.SessionID)
	case errors.Is(err, runtime.ErrConflict):
		return events.Run{}, fmt.Errorf("%w: session: %s already has events", ErrForkInput, o.SessionID)
	case err != nil:
		return events.Run{}, fmt.Errorf("replay: fork: create run: %w", err)
	}
	rs, err := store.Open(ctx, o.SessionID, o.RunID)
	if err != nil {
		return events.Run{}, fmt.Errorf("replay: fork: open: %w", err)
	}
	// The session's window before the run's first event.
	var first uint64
	for _, e := range h.Events {
		if e.RunID == h.RunID {
			first = e.Seq
			break
		}
	}
	if first > 1 {
		if pre, _, _ := h.windowAt(first - 1); len(pre) > 0 {
			if err := rs.Compact(ctx, session.Compaction{Window: pre, Reason: "fork"}); err != nil {
				return events.Run{}, fmt.Errorf("replay: fork: the session's earlier window: %w", err)
			}
		}
	}
	for _, e := range h.Events {
		if e.Seq > at.Seq {
			break
		}
		switch {
		case e.Type == events.CheckpointCommitted && e.RunID == h.RunID:
			cp, err := e.Checkpoint()
			if err != nil {
				return events.Run{}, err
			}
			if o.ContractHash != "" {
				cp.ContractHash = o.ContractHash
			}
			if err := rs.SaveCheckpoint(ctx, cp); err != nil {
				return events.Run{}, fmt.Errorf("replay: fork: copy revision %d: %w", cp.Revision, err)
			}
		case e.Type == events.WindowCompacted:
			var c events.Compaction
			if e.Payload(&c) != nil || c.RunID != h.RunID {
				continue
			}
			if err := rs.Compact(ctx, c.Compaction); err != nil {
				return events.Run{}, fmt.Errorf("replay: fork: copy compaction seq %d: %w", e.Seq, err)
			}
		}
	}
	return rec, nil
}

// ContractHash is the contract hash the runtime gives every checkpoint of
// a run of s (runtime.ContractHash: the definition, subagents and
// capability catalog; not the limits, budget or redactor). Use it to fork
// a run onto another definition version (ForkOptions.ContractHash).
func ContractHash(s Setup) (string, error) {
	hash, err := runtime.ContractHash(s.Definition, s.Subagents, s.Capabilities)
	if err != nil {
		return "", fmt.Errorf("replay: contract hash: %w", err)
	}
	return hash, nil
}
