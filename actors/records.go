package actors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/lru"
	"github.com/cairn-agents/cairn/runtime"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// ChildIDs derives the session and run IDs of the child a parent run
// spawns with a tool call: a retried Spawn names the same child (C25).
// Call IDs are hashed, so whatever the model sent is a valid subject token.
func ChildIDs(parentRun, callID string) (sessionID, runID string) {
	h := sha256.Sum256([]byte(parentRun + "\x00" + callID))
	return "s" + hex.EncodeToString(h[:10]), "r" + hex.EncodeToString(h[10:20])
}

// keyOf makes a KV key token from any string.
func keyOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:12])
}

// runLog is the node's access to the run runLog outside the runtime's Store:
// run records, end events, statuses.
type runLog struct {
	store *cjs.Store
	now   func() time.Time
	// records caches run records read from the log. A record is written
	// once (its subject is fenced at creation) and never changed, so a
	// record read once is the record; every attempt and every completion
	// reads its run's.
	records *lru.Cache[string, events.Run]
	// created keeps, for runs this node created in a new session, the
	// record's sequence, until the run's first attempt here takes it: the
	// session then holds that record alone, unless it moved on since,
	// which the attempt's lease, fenced on it, finds out
	// (cjs.Store.OpenCreated). Bounded: a run attempted on another member
	// leaves its entry to be pushed out.
	created *lru.Cache[string, uint64]
}

// Bounds of the run record cache: records carry the run's message. A few
// thousand cover the runs a node has in flight; more is memory a node
// with 100,000 parked runs (B5) holds for nothing.
const (
	recordCacheItems = 4096
	recordCacheBytes = 8 << 20
)

func (l *runLog) last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := l.store.Last(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("actors: %w", err)
	}
	return m, nil
}

// lastPayload decodes the payload of the last event on subject into v. It
// reports whether there was one.
func (l *runLog) lastPayload(ctx context.Context, subject string, v any) (bool, error) {
	m, err := l.lastDecoded(ctx, subject, v)
	return m != nil, err
}

// lastDecoded is lastPayload returning the message too (nil when there is
// none), for its time.
func (l *runLog) lastDecoded(ctx context.Context, subject string, v any) (*jetstream.RawStreamMsg, error) {
	m, err := l.last(ctx, subject)
	if err != nil || m == nil {
		return nil, err
	}
	e, err := l.store.Keys().Decode(m.Data)
	if err != nil {
		return nil, fmt.Errorf("actors: %s seq %d: %w", subject, m.Sequence, err)
	}
	return m, e.Payload(v)
}

// publish writes one event fenced against its session's last sequence.
// A wrong-last-sequence answer is reported as runtime.ErrConflict.
func (l *runLog) publish(ctx context.Context, subject string, ev events.Envelope, id string, expectSeq uint64) error {
	body, hdrs, err := l.store.Keys().Encode(ev, id)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	for k, v := range hdrs {
		msg.Header.Set(k, v)
	}
	// Through the store's writer: it shares atomic batches with the runs'
	// commits when many runs start at once, and settles a lost
	// acknowledgement from the log. A conflict wraps runtime.ErrConflict.
	if _, err := l.store.Write(ctx, msg, id, events.SessionAll(ev.SessionID), expectSeq); err != nil {
		return fmt.Errorf("actors: %s: %w", id, err)
	}
	return nil
}

// errExists reports a run record that is already there: the store's
// ErrRunExists, which createRun passes on, and admission's createOnce's
// answer too.
var errExists = cjs.ErrRunExists

// createRun writes a run's RunCreated event through the store's CreateRun,
// fenced against the whole session: for a new session the expected
// sequence is 0, so a second creation of the same child fails; for a
// continuation it is the session's last sequence, so two continuations of
// one session are serialized (C26). It returns errExists with the stored
// record when the run was created before, runtime.ErrConflict when the
// session moved on without it.
func (l *runLog) createRun(ctx context.Context, r events.Run, expectSeq uint64) (*events.Run, error) {
	got, seq, err := l.store.CreateRunSeq(ctx, r, expectSeq, l.now())
	if err != nil {
		return got, fmt.Errorf("actors: %w", err)
	}
	r = *got // as stored: without its definition version below DefinitionVersion
	key := r.SessionID + "/" + r.RunID
	if l.records != nil {
		// Written now, never changed: its first attempt reads it here.
		l.records.Add(key, r, len(r.Message)+len(key)+256)
	}
	if l.created != nil && expectSeq == 0 && seq > 0 {
		l.created.Add(key, seq, len(key)+16)
	}
	return got, nil
}

// takeCreated returns, once, the sequence of a run's record when this node
// created it in a new session (see created).
func (l *runLog) takeCreated(sessionID, runID string) (uint64, bool) {
	if l.created == nil {
		return 0, false
	}
	return l.created.Take(sessionID + "/" + runID)
}

// readRun returns a run's record, nil when there is none.
func (l *runLog) readRun(ctx context.Context, sessionID, runID string) (*events.Run, error) {
	key := sessionID + "/" + runID
	if l.records != nil {
		if r, ok := l.records.Get(key); ok {
			return &r, nil
		}
	}
	r, err := l.store.ReadRun(ctx, sessionID, runID)
	if err != nil {
		return nil, fmt.Errorf("actors: %w", err)
	}
	if r != nil && l.records != nil {
		l.records.Add(key, *r, len(r.Message)+len(key)+256)
	}
	return r, nil
}

// status is what the log says of a run: completed (with its reply), ended
// (cancelled or failed), or running.
type status struct {
	Status runtime.CallStatus
	Reply  *runtime.Reply
	Error  string
}

func (l *runLog) status(ctx context.Context, sessionID, runID string) (status, error) {
	// One read of both (at most one exists: each is fenced on the session),
	// and of the session's purge marker: a purged run's end is gone with
	// the rest of its events, and it must not read as running (a cancel
	// would write an end into the purged session, a Result wait forever).
	lasts, err := l.store.Lasts(ctx, events.RunEndedSubject(sessionID, runID), events.CheckpointSubject(sessionID, runID, true),
		events.SessionPurgedSubject(sessionID))
	if err != nil {
		return status{}, fmt.Errorf("actors: status of %s: %w", runID, err)
	}
	if m := lasts[0]; m != nil {
		var end events.Ended
		e, err := l.store.Keys().Decode(m.Data)
		if err == nil {
			err = e.Payload(&end)
		}
		if err != nil {
			return status{}, fmt.Errorf("actors: %s seq %d: %w", m.Subject, m.Sequence, err)
		}
		return status{Status: runtime.CallStatus(end.Status), Error: end.Reason}, nil
	}
	if m := lasts[1]; m != nil {
		// Through the store: a large completion's payload is in the object store.
		cp, err := l.store.DecodeCheckpoint(ctx, m)
		if err != nil {
			return status{}, fmt.Errorf("actors: run %s completion: %w", runID, err)
		}
		return status{Status: runtime.StatusCompleted, Reply: cp.Reply}, nil
	}
	if lasts[2] != nil {
		return status{Status: runtime.StatusPurged, Error: "the session was purged when its retention ran out"}, nil
	}
	return status{Status: runtime.StatusRunning}, nil
}

// endRun records that a run ended without completing, fenced against its
// session so it also fences out the run's own writer. A run that completed
// or ended first keeps that status, which endRun returns.
func (l *runLog) endRun(ctx context.Context, sessionID, runID string, st runtime.CallStatus, reason string) (status, error) {
	for attempt := 0; attempt < 20; attempt++ {
		cur, err := l.status(ctx, sessionID, runID)
		if err != nil {
			return status{}, err
		}
		if cur.Status != runtime.StatusRunning {
			return cur, nil
		}
		last, err := l.last(ctx, events.SessionAll(sessionID))
		if err != nil {
			return status{}, err
		}
		var seq uint64
		if last != nil {
			seq = last.Sequence
		}
		ev, err := events.New(events.RunEnded, sessionID, runID, 0, 0, l.now(), events.Ended{Status: string(st), Reason: reason})
		if err != nil {
			return status{}, err
		}
		err = l.publish(ctx, events.RunEndedSubject(sessionID, runID), ev, "ended."+sessionID+"."+runID, seq)
		if err == nil {
			return status{Status: st, Error: reason}, nil
		}
		if !errors.Is(err, runtime.ErrConflict) {
			return status{}, err
		}
		// The run wrote meanwhile: read again.
	}
	return status{}, fmt.Errorf("actors: end run %s: the session kept moving: %w", runID, runtime.ErrConflict)
}
