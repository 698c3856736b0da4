package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// ErrRunExists is CreateRun's answer when the run's record is already in
// the log; CreateRun returns the stored record with it.
var ErrRunExists = errors.New("jetstream: run exists")

// CreateRun writes r's RunCreated event (its time at), fenced against the
// last sequence of r's whole session: for a new session expectSeq is 0, so
// a second creation of the same run fails; for a continuation it is the
// session's last sequence, so two continuations of one session are
// serialized (C26). It returns the record as stored:
//   - r itself when this call stored it, also when the acknowledgement of
//     its publish was lost (the Log settles that by Msg-Id);
//   - the stored record with an error wrapping ErrRunExists when the run
//     was created before, by any writer or an earlier call;
//   - an error wrapping runtime.ErrConflict when the session moved on and
//     the run has no record;
//   - any other error when the outcome is unknown (a later CreateRun of
//     the same r answers ErrRunExists if it was stored).
func (s *Store) CreateRun(ctx context.Context, r events.Run, expectSeq uint64, at time.Time) (*events.Run, error) {
	got, _, err := s.CreateRunSeq(ctx, r, expectSeq, at)
	return got, err
}

// CreateRunSeq is CreateRun, with the record's sequence when this call
// stored it (zero otherwise).
func (s *Store) CreateRunSeq(ctx context.Context, r events.Run, expectSeq uint64, at time.Time) (*events.Run, uint64, error) {
	if r.RunID == "" {
		return nil, 0, fmt.Errorf("jetstream: create run of session %s: empty run ID", r.SessionID)
	}
	ev, r, err := events.NewRun(r, at, s.WriteVersion())
	if err != nil {
		return nil, 0, fmt.Errorf("jetstream: create run %s: %w", r.RunID, err)
	}
	// The Msg-Id is this call's own, not one every creation of the run
	// shares: with a shared one a second creation within the duplicate
	// window would be settled as this call's lost acknowledgement (the
	// session's last message carries that Msg-Id) and told it created the
	// run, whatever the stored record holds. Within the call, the Log's
	// retries and settling all use this one id.
	id := uniqueID("created." + r.SessionID + "." + r.RunID + ".")
	body, hdrs, err := s.cfg.Keys.Encode(ev, id)
	if err != nil {
		return nil, 0, fmt.Errorf("jetstream: create run %s: %w", r.RunID, err)
	}
	msg := nats.NewMsg(events.RunCreatedSubject(r.SessionID, r.RunID))
	msg.Data = body
	for k, v := range hdrs {
		msg.Header.Set(k, v)
	}
	seq, err := s.Write(ctx, msg, id, events.SessionAll(r.SessionID), expectSeq)
	if err == nil {
		return &r, seq, nil
	}
	if !errors.Is(err, runtime.ErrConflict) {
		return nil, 0, fmt.Errorf("jetstream: create run %s of session %s: %w", r.RunID, r.SessionID, err)
	}
	// Fenced out: by the run's own record (created before), or by other
	// events of the session.
	existing, rerr := s.ReadRun(ctx, r.SessionID, r.RunID)
	if rerr != nil {
		return nil, 0, fmt.Errorf("jetstream: create run %s of session %s: %w; then: %w", r.RunID, r.SessionID, err, rerr)
	}
	if existing != nil {
		return existing, 0, fmt.Errorf("jetstream: create run %s of session %s: %w", r.RunID, r.SessionID, ErrRunExists)
	}
	return nil, 0, fmt.Errorf("jetstream: create run %s of session %s: %w", r.RunID, r.SessionID, err)
}

// ReadRun returns a run's record, nil when there is none. It reads the
// session's log from the stream leader when replicated: its callers decide
// from it (whether a run exists), and a follower may be behind.
func (s *Store) ReadRun(ctx context.Context, sessionID, runID string) (*events.Run, error) {
	m, err := s.Last(ctx, events.RunCreatedSubject(sessionID, runID))
	if err != nil || m == nil {
		return nil, err
	}
	e, err := s.cfg.Keys.Decode(m.Data)
	if err != nil {
		return nil, fmt.Errorf("jetstream: run %s record, seq %d: %w", runID, m.Sequence, err)
	}
	var r events.Run
	if err := e.Payload(&r); err != nil {
		return nil, fmt.Errorf("jetstream: run %s record, seq %d: %w", runID, m.Sequence, err)
	}
	return &r, nil
}

// uniqueID is prefix and 16 random hex digits.
func uniqueID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
