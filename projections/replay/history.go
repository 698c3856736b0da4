// Package replay makes a run debuggable after the fact from the log alone:
// it reconstructs the checkpoint and the transcript at any revision
// (History.At), prints the timeline (Timeline), runs the loop again from a
// revision against the recorded model responses and capability results and
// reports where the new commits differ from the logged ones (Redrive),
// starts a new run from a revision of an existing one (Fork), and diffs two
// revisions or two runs (Diff).
//
// Nothing here calls a provider or a capability, or writes to the log,
// except Fork, which writes only the new session.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// Errors of the package.
var (
	ErrNotFound   = errors.New("replay: run not found in the log")
	ErrNoRevision = errors.New("replay: no such revision")
)

// Commit is one logged checkpoint revision of the run.
type Commit struct {
	Seq        uint64             `json:"seq"`
	Time       time.Time          `json:"time"`
	Epoch      int64              `json:"epoch"`
	Checkpoint runtime.Checkpoint `json:"checkpoint"`
}

// History is a run's log: its own events and its session's (a session's
// transcript is shared by the runs that continue it).
type History struct {
	SessionID string
	RunID     string
	// Run is the run's creation record; zero when the log has none (a run
	// written by a host without the node's records).
	Run events.Run
	// Events are the session's events in stream order, payloads resolved.
	Events []projections.Event
	// Commits are the run's checkpoint revisions in order.
	Commits []Commit
}

// FromEvents builds the history of run from its session's events in stream
// order.
func FromEvents(runID string, evs []projections.Event) (*History, error) {
	evs, err := whole(runID, evs)
	if err != nil {
		return nil, err
	}
	h := &History{RunID: runID}
	for _, e := range evs {
		if e.RunID != runID {
			continue
		}
		h.SessionID = e.SessionID
		switch e.Type {
		case events.RunCreated:
			if err := e.Payload(&h.Run); err != nil {
				return nil, fmt.Errorf("replay: seq %d: %w", e.Seq, err)
			}
		case events.CheckpointCommitted:
			cp, err := e.Checkpoint()
			if err != nil {
				return nil, err
			}
			h.Commits = append(h.Commits, Commit{Seq: e.Seq, Time: e.Time, Epoch: e.Epoch, Checkpoint: *cp})
		}
	}
	if h.SessionID == "" {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	for _, e := range evs {
		if e.SessionID == h.SessionID {
			h.Events = append(h.Events, e)
		}
	}
	return h, nil
}

// whole returns evs with every checkpoint that lists its used call IDs
// on a base (events.Checkpoint.UsedCallIDsBase), or only the calls it
// changed (CallsBaseRev), rewritten whole, as its run's handle loads it:
// a history's states, diffs, re-drives and forks then see whole
// checkpoints. The bases are earlier events of the same run in evs (a
// session read from its start), found by revision (a run's revisions are
// unique in the log; the sequences an event names differ in a copy of the
// log). Only run's own events fail the history; another run's that cannot
// be made whole are left as they are.
func whole(run string, evs []projections.Event) ([]projections.Event, error) {
	var out []projections.Event
	f := events.NewFolder()
	for i, e := range evs {
		if e.Type != events.CheckpointCommitted {
			continue
		}
		p, err := events.DecodeCheckpoint(e.Envelope)
		var cp *runtime.Checkpoint
		if err == nil {
			cp, err = f.Whole(e.RunID, p)
		}
		if err != nil {
			if e.RunID == run {
				return nil, fmt.Errorf("replay: seq %d: %w", e.Seq, err)
			}
			continue
		}
		if p.UsedCallIDsBase == 0 && p.ListsCalls() {
			continue // whole as it is
		}
		b, err := json.Marshal(events.Checkpoint{Checkpoint: *cp})
		if err != nil {
			return nil, fmt.Errorf("replay: seq %d: %w", e.Seq, err)
		}
		if out == nil { // copy on first write: evs is the caller's
			out = slices.Clone(evs)
		}
		out[i].Data = b
	}
	if out == nil {
		return evs, nil
	}
	return out, nil
}

// Source is the log a history is read from.
type Source = projections.Source

// Load reads a run's history from the log: the session is found from any
// event of the run, then the whole session is read with one ordered
// consumer up to its last event.
func Load(ctx context.Context, src Source, runID string) (*History, error) {
	if err := events.ValidID(runID); err != nil {
		return nil, fmt.Errorf("replay: run: %w", err)
	}
	stream := src.Name()
	st, err := src.JS.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("replay: stream %s: %w", stream, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.RunAnySession(runID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("replay: find run %s: %w", runID, err)
	}
	subj, err := events.ParseSubject(m.Subject)
	if err != nil {
		return nil, fmt.Errorf("replay: find run %s: %w", runID, err)
	}
	return LoadIn(ctx, src, subj.SessionID, runID)
}

// LoadIn reads the history of a run of a known session.
func LoadIn(ctx context.Context, src Source, sessionID, runID string) (*History, error) {
	if err := events.ValidID(sessionID); err != nil {
		return nil, fmt.Errorf("replay: session: %w", err)
	}
	stream := src.Name()
	st, err := src.JS.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("replay: stream %s: %w", stream, err)
	}
	evs, err := ReadSession(ctx, src, st, sessionID)
	if err != nil {
		return nil, err
	}
	return FromEvents(runID, evs)
}

// ReadSession reads every event of a session, in order, payloads resolved.
func ReadSession(ctx context.Context, src Source, st jetstream.Stream, sessionID string) ([]projections.Event, error) {
	filter := events.SessionAll(sessionID)
	last, err := projections.LastSeq(ctx, st, []string{filter})
	if err != nil || last == 0 {
		return nil, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("replay: read session %s: %w", sessionID, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("replay: read session %s: %w", sessionID, err)
	}
	defer it.Stop()
	var out []projections.Event
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("replay: read session %s: %w", sessionID, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("replay: read session %s: %w", sessionID, err)
		}
		e, err := src.Keys.Decode(m.Data())
		if err == nil {
			err = projections.Resolve(ctx, src.JS, src.Keys, &e)
		}
		if err != nil {
			return nil, fmt.Errorf("replay: %s seq %d: %w", m.Subject(), meta.Sequence.Stream, err)
		}
		out = append(out, projections.Event{Seq: meta.Sequence.Stream, Subject: m.Subject(), Envelope: e})
		if meta.Sequence.Stream >= last {
			return out, nil
		}
	}
}

// Revision returns the logged checkpoint of revision rev (1-based).
func (h *History) Revision(rev int64) (*Commit, error) {
	for i := range h.Commits {
		if h.Commits[i].Checkpoint.Revision == rev {
			return &h.Commits[i], nil
		}
	}
	return nil, fmt.Errorf("%w: run %s has revisions 1-%d, not %d", ErrNoRevision, h.RunID, h.Last(), rev)
}

// Last is the last revision logged (0 when none).
func (h *History) Last() int64 {
	if n := len(h.Commits); n > 0 {
		return h.Commits[n-1].Checkpoint.Revision
	}
	return 0
}

// State is a run reconstructed at one revision.
type State struct {
	Revision   int64               `json:"revision"`
	Seq        uint64              `json:"seq"`
	Checkpoint *runtime.Checkpoint `json:"checkpoint"`
	// Window is the session's context window right after the revision
	// (what the next model request is built from).
	Window []model.Message `json:"window"`
	// Transcript is every message of the session up to the revision
	// (the audit history, compactions not applied).
	Transcript []model.Message `json:"transcript"`
	// Compactions are the session's compactions up to the revision.
	Compactions []session.Compaction `json:"compactions,omitempty"`
}

// At reconstructs the run at revision rev; 0 means the last revision.
func (h *History) At(rev int64) (*State, error) {
	if rev == 0 {
		rev = h.Last()
	}
	c, err := h.Revision(rev)
	if err != nil {
		return nil, err
	}
	cp := c.Checkpoint
	st := &State{Revision: rev, Seq: c.Seq, Checkpoint: &cp}
	st.Window, st.Transcript, st.Compactions = h.windowAt(c.Seq)
	return st, nil
}

// windowAt folds the session's commits and compactions up to seq.
func (h *History) windowAt(seq uint64) (window, all []model.Message, comps []session.Compaction) {
	for _, e := range h.Events {
		if e.Seq > seq {
			break
		}
		switch e.Type {
		case events.CheckpointCommitted:
			cp, err := e.Checkpoint()
			if err != nil {
				continue
			}
			window = append(window, cp.Append...)
			all = append(all, cp.Append...)
		case events.WindowCompacted:
			var c events.Compaction
			if e.Payload(&c) != nil {
				continue
			}
			window = append([]model.Message(nil), c.Compaction.Window...)
			comps = append(comps, c.Compaction)
		}
	}
	return window, all, comps
}
