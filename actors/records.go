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
	"github.com/cairn-agents/cairn/runtime"
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

// log is the node's access to the run log outside the runtime's Store:
// run records, end events, statuses.
type log struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	now    func() time.Time
}

func (l *log) last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := l.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("actors: read %s: %w", subject, err)
	}
	return m, nil
}

// errExists reports a run record that is already there.
var errExists = errors.New("actors: run exists")

// createRun publishes a run's RunCreated event fenced against the whole
// session: for a new session the expected sequence is 0, so a second
// creation of the same child fails; for a continuation it is the session's
// last sequence, so two continuations of one session are serialized (C26).
// It returns errExists with the stored record when the run was created
// before.
func (l *log) createRun(ctx context.Context, r events.Run, expectSeq uint64) (*events.Run, error) {
	ev, err := events.New(events.RunCreated, r.SessionID, r.RunID, 0, 0, l.now(), r)
	if err != nil {
		return nil, err
	}
	id := "created." + r.SessionID + "." + r.RunID
	body, hdrs, err := events.Encode(ev, id)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(events.RunCreatedSubject(r.SessionID, r.RunID))
	msg.Data = body
	for k, v := range hdrs {
		msg.Header.Set(k, v)
	}
	_, err = l.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequenceForSubject(expectSeq, events.SessionAll(r.SessionID)), jetstream.WithMsgID(id))
	if err == nil {
		return &r, nil
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		existing, rerr := l.readRun(ctx, r.SessionID, r.RunID)
		if rerr != nil {
			return nil, rerr
		}
		if existing != nil {
			return existing, errExists
		}
		return nil, fmt.Errorf("actors: create run %s: session %s moved on: %w", r.RunID, r.SessionID, runtime.ErrConflict)
	}
	return nil, fmt.Errorf("actors: create run %s: %w", r.RunID, err)
}

// readRun returns a run's record, nil when there is none.
func (l *log) readRun(ctx context.Context, sessionID, runID string) (*events.Run, error) {
	m, err := l.last(ctx, events.RunCreatedSubject(sessionID, runID))
	if err != nil || m == nil {
		return nil, err
	}
	e, err := events.Decode(m.Data)
	if err != nil {
		return nil, fmt.Errorf("actors: run %s record: %w", runID, err)
	}
	var r events.Run
	if err := e.Payload(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

// status is what the log says of a run: completed (with its reply), ended
// (cancelled or failed), or running.
type status struct {
	Status runtime.CallStatus
	Reply  *runtime.Reply
	Error  string
}

func (l *log) status(ctx context.Context, sessionID, runID string) (status, error) {
	m, err := l.last(ctx, events.RunEndedSubject(sessionID, runID))
	if err != nil {
		return status{}, err
	}
	if m != nil {
		e, err := events.Decode(m.Data)
		if err != nil {
			return status{}, err
		}
		var end events.Ended
		if err := e.Payload(&end); err != nil {
			return status{}, err
		}
		return status{Status: runtime.CallStatus(end.Status), Error: end.Reason}, nil
	}
	m, err = l.last(ctx, events.CheckpointSubject(sessionID, runID, true))
	if err != nil {
		return status{}, err
	}
	if m != nil {
		e, err := events.Decode(m.Data)
		if err != nil {
			return status{}, err
		}
		var p events.Checkpoint
		if err := e.Payload(&p); err != nil {
			return status{}, fmt.Errorf("actors: run %s completion: %w", runID, err)
		}
		return status{Status: runtime.StatusCompleted, Reply: p.Checkpoint.Reply}, nil
	}
	return status{Status: runtime.StatusRunning}, nil
}

// endRun records that a run ended without completing, fenced against its
// session so it also fences out the run's own writer. A run that completed
// or ended first keeps that status, which endRun returns.
func (l *log) endRun(ctx context.Context, sessionID, runID string, st runtime.CallStatus, reason string) (status, error) {
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
		id := "ended." + sessionID + "." + runID
		body, hdrs, err := events.Encode(ev, id)
		if err != nil {
			return status{}, err
		}
		msg := nats.NewMsg(events.RunEndedSubject(sessionID, runID))
		msg.Data = body
		for k, v := range hdrs {
			msg.Header.Set(k, v)
		}
		_, err = l.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequenceForSubject(seq, events.SessionAll(sessionID)), jetstream.WithMsgID(id))
		if err == nil {
			return status{Status: st, Error: reason}, nil
		}
		var api *jetstream.APIError
		if !errors.As(err, &api) || (api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence && api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return status{}, fmt.Errorf("actors: end run %s: %w", runID, err)
		}
		// The run wrote meanwhile: read again.
	}
	return status{}, fmt.Errorf("actors: end run %s: the session kept moving: %w", runID, runtime.ErrConflict)
}
