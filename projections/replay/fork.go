package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
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
func Fork(ctx context.Context, js jetstream.JetStream, store *cjs.Store, h *History, o ForkOptions) (events.Run, error) {
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
	if rec.Message == "" && len(h.Commits) > 0 && len(h.Commits[0].Checkpoint.Append) > 0 {
		rec.Message = h.Commits[0].Checkpoint.Append[0].Text()
	}
	ev, err := events.New(events.RunCreated, o.SessionID, o.RunID, 0, 0, h.Commits[0].Time, rec)
	if err != nil {
		return events.Run{}, err
	}
	body, hdrs, err := events.Encode(ev, "created."+o.SessionID+"."+o.RunID)
	if err != nil {
		return events.Run{}, err
	}
	msg := nats.NewMsg(events.RunCreatedSubject(o.SessionID, o.RunID))
	msg.Data = body
	for k, v := range hdrs {
		msg.Header.Set(k, v)
	}
	// Expected last sequence 0 on the whole session: the session is new.
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequenceForSubject(0, events.SessionAll(o.SessionID))); err != nil {
		if cjs.IsConflict(err) {
			return events.Run{}, fmt.Errorf("%w: session: %s already has events", ErrForkInput, o.SessionID)
		}
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

// ContractHash is the contract hash the runtime gives a run of s: it makes
// the first commit of a fresh run against a store that keeps nothing and
// reads the hash from it. Use it to fork a run onto another definition
// version (ForkOptions.ContractHash).
func ContractHash(ctx context.Context, s Setup) (string, error) {
	probe := &hashProbe{}
	red := s.Redactor
	if red == nil {
		red = runtime.Secrets(nil)
	}
	_, err := runtime.Run(ctx, runtime.Input{
		Definition: s.Definition, Subagents: s.Subagents, Capabilities: s.Capabilities, ModelLimits: s.Limits, Budget: s.Budget,
		Model: &recordedModel{h: &History{}, st: &store{}}, Store: probe, Backend: noBackend{},
		ExecutorFactory: recordedExecutors{}, Controller: &recordedController{st: &store{}}, Redactor: red,
		Sink: runtime.SinkFunc(func(context.Context, runtime.SinkEvent) {}), Message: "probe", IDs: fixedID("probe"),
	})
	if probe.hash == "" {
		return "", fmt.Errorf("replay: contract hash: %w", err)
	}
	return probe.hash, nil
}

var errProbed = errors.New("replay: probed")

type hashProbe struct{ hash string }

func (p *hashProbe) LoadCheckpoint(context.Context) (*runtime.Checkpoint, error) { return nil, nil }
func (p *hashProbe) Load(context.Context) ([]model.Message, error)               { return nil, nil }
func (p *hashProbe) Compact(context.Context, session.Compaction) error           { return errProbed }
func (p *hashProbe) SaveCheckpoint(_ context.Context, cp *runtime.Checkpoint) error {
	p.hash = cp.ContractHash
	return errProbed
}
