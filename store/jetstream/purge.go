package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// SessionLog is what the log holds of one session, read for a retention
// decision and its purge (ReadSession).
type SessionLog struct {
	SessionID string
	// Runs are the session's runs in creation order; a run's Status is
	// empty while it has not ended, and its Ended is then zero.
	Runs []events.PurgedRun
	// Last is the sequence of the session's last event and LastTime its
	// time; a purge is fenced on Last.
	Last     uint64
	LastTime time.Time
	// Events and Bytes count the session's events and their bodies.
	Events int
	Bytes  int64
	// Objects are the object store keys of the session's out-of-line
	// payloads.
	Objects []string
	// Purge is the session's purge marker and PurgeSeq its sequence, when
	// the session was purged (events below it may remain when the purge
	// stopped half way: FinishPurge removes them).
	Purge    *events.Purge
	PurgeSeq uint64
}

// ReadSession reads every event of a session; nil when it has none. An
// event it cannot decode (a newer schema, a key it lacks) is an error: a
// session is purged only when every run of it is known to have ended.
func (s *Store) ReadSession(ctx context.Context, sessionID string) (*SessionLog, error) {
	if err := events.ValidID(sessionID); err != nil {
		return nil, fmt.Errorf("jetstream: read session: %w", err)
	}
	out := &SessionLog{SessionID: sessionID}
	at := map[string]int{} // run ID -> index in out.Runs
	run := func(id string) *events.PurgedRun {
		i, ok := at[id]
		if !ok {
			i = len(out.Runs)
			at[id] = i
			out.Runs = append(out.Runs, events.PurgedRun{RunID: id})
		}
		return &out.Runs[i]
	}
	err := s.Scan(ctx, events.SessionAll(sessionID), func(subject string, seq uint64, _ nats.Header, data []byte) error {
		e, err := s.cfg.Keys.Decode(data)
		if err != nil {
			return fmt.Errorf("%s seq %d: %w", subject, seq, err)
		}
		out.Last, out.LastTime = seq, e.Time
		out.Events++
		out.Bytes += int64(len(data))
		if e.DataRef != nil && e.DataRef.Bucket == blobBucket {
			out.Objects = append(out.Objects, e.DataRef.Key)
		}
		switch e.Type {
		case events.RunCreated:
			var rec events.Run
			if err := e.Payload(&rec); err != nil {
				return fmt.Errorf("%s seq %d: %w", subject, seq, err)
			}
			r := run(rec.RunID)
			r.Agent, r.Owner, r.RootRunID, r.ParentRunID, r.ParentSessionID, r.ParentCallID, r.Continues, r.Created =
				rec.Agent, rec.Owner, rec.RootRunID, rec.ParentRunID, rec.ParentSessionID, rec.ParentCallID, rec.Continues, e.Time
		case events.CheckpointCommitted:
			if sub, err := events.ParseSubject(subject); err != nil || sub.Kind != events.KindDone {
				return nil
			}
			p, err := s.payloadOf(ctx, e)
			if err != nil {
				return fmt.Errorf("%s seq %d: %w", subject, seq, err)
			}
			r := run(e.RunID)
			r.Status, r.Ended = string(runtime.RunStatus(runtime.StatusCompleted, p.Checkpoint.Reply)), e.Time
		case events.RunEnded:
			var end events.Ended
			if err := e.Payload(&end); err != nil {
				return fmt.Errorf("%s seq %d: %w", subject, seq, err)
			}
			if r := run(e.RunID); r.Status == "" {
				r.Status, r.Ended = end.Status, e.Time
			}
		case events.SessionPurged:
			var p events.Purge
			if err := e.Payload(&p); err != nil {
				return fmt.Errorf("%s seq %d: %w", subject, seq, err)
			}
			out.Purge, out.PurgeSeq = &p, seq
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: read session %s: %w", sessionID, err)
	}
	if out.Events == 0 {
		return nil, nil
	}
	return out, nil
}

// RunFinished reports whether a run has ended: its completed commit or
// its end is in the log, or its session was purged.
func (s *Store) RunFinished(ctx context.Context, sessionID, runID string) (bool, error) {
	ms, err := s.Lasts(ctx, events.CheckpointSubject(sessionID, runID, true), events.RunEndedSubject(sessionID, runID), events.SessionPurgedSubject(sessionID))
	if err != nil {
		return false, fmt.Errorf("jetstream: has run %s ended: %w", runID, err)
	}
	for _, m := range ms {
		if m != nil {
			return true, nil
		}
	}
	return false, nil
}

// WritePurge writes a session's purge marker, fenced on p.Before, the
// session's last sequence as ReadSession saw it: an error wrapping
// runtime.ErrConflict when anything was written to the session since (a
// continuation), and nothing is written. It returns the marker's sequence.
// The marker comes first so that a purge stopped half way is finished by
// the next (FinishPurge), and what was purged is in the log.
func (s *Store) WritePurge(ctx context.Context, sessionID string, p events.Purge, at time.Time) (uint64, error) {
	if p.Before == 0 {
		return 0, fmt.Errorf("jetstream: purge of session %s: no sequence to fence on", sessionID)
	}
	ev, err := events.New(events.SessionPurged, sessionID, "", 0, 0, at, p)
	if err != nil {
		return 0, fmt.Errorf("jetstream: purge of session %s: %w", sessionID, err)
	}
	ev.Version = events.PurgeVersion
	id := uniqueID("purged." + sessionID + ".")
	body, hdrs, err := s.cfg.Keys.Encode(ev, id)
	if err != nil {
		return 0, fmt.Errorf("jetstream: purge of session %s: %w", sessionID, err)
	}
	if len(body) > s.maxInline {
		return 0, fmt.Errorf("jetstream: purge of session %s: its marker (%d runs, %d objects) is %d bytes: %w", sessionID, len(p.Runs), len(p.Objects), len(body), ErrTooLarge)
	}
	msg := nats.NewMsg(events.SessionPurgedSubject(sessionID))
	msg.Data = body
	for k, v := range hdrs {
		msg.Header.Set(k, v)
	}
	seq, err := s.Write(ctx, msg, id, events.SessionAll(sessionID), p.Before)
	if err != nil {
		return 0, fmt.Errorf("jetstream: purge of session %s: %w", sessionID, err)
	}
	return seq, nil
}

// FinishPurge removes the objects a session's events referenced, then
// every event of the session below its purge marker at sequence marker.
// Each step may be done again: a purge that stopped half way is finished
// by calling it again with the marker's own payload. The objects go
// first, so that a session whose marker is alone in the log has nothing
// left anywhere (a reader racing the purge may meet a payload gone before
// its event: the session is being purged).
func (s *Store) FinishPurge(ctx context.Context, sessionID string, marker uint64, objects []string) error {
	if marker == 0 {
		return fmt.Errorf("jetstream: finish purge of session %s: no marker", sessionID)
	}
	for _, key := range objects {
		dctx, cancel := context.WithTimeout(ctx, blobTimeout)
		err := s.blobs.Delete(dctx, key)
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("jetstream: finish purge of session %s: object %s: %w", sessionID, key, err)
		}
	}
	if err := s.PurgeSubject(ctx, events.SessionAll(sessionID), marker); err != nil {
		return fmt.Errorf("jetstream: finish purge of session %s: %w", sessionID, err)
	}
	return nil
}

// PurgeSubject removes from the Log's stream every message on filter
// (wildcards allowed) below sequence below, or all of them when below is
// 0: how a purge of a session removes its events, and of its runs their
// entries in Cairn's KV buckets (whose streams have no tombstone to keep).
// The request goes to the stream's leader, and is sent again while
// JetStream is out (Setup).
func (w *Log) PurgeSubject(ctx context.Context, filter string, below uint64) error {
	if err := validFilter(filter); err != nil {
		return err
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(filter)}
	if below > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(below))
	}
	return Setup(ctx, func(ctx context.Context) error { return w.stream.Purge(ctx, opts...) })
}
