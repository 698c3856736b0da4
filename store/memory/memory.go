// Package memory is an in-memory runtime.Store for tests and demos.
//
// It is never a production durability or coordination mechanism (C18): its
// state dies with the process and its leases fence only handles of the same
// DB. It behaves like a durable store in every other way the run contract
// needs: everything it keeps is JSON-roundtripped (so a field a real store
// would lose is lost here too), revisions advance by exactly one, an
// identical retry of the committed revision is a no-op, a stale or
// conflicting one fails, leases fence older handles, compaction keeps the
// audit history.
//
// Faults are injected by wrapping a store with store/faults: fail the i-th
// operation before it takes effect, or apply it and then report an error, as
// when an acknowledgement is lost.
package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// DB holds any number of sessions and runs.
type DB struct {
	mu       sync.Mutex
	sessions map[string]*sessionData
	runs     map[string]*runData
}

type sessionData struct {
	history     [][]byte // every appended message, JSON
	ids         map[string]bool
	window      [][]byte
	compactions [][]byte
	active      string // the admitted run, "" when none
}

type runData struct {
	session  string
	epoch    int64
	revision int64
	// checkpoint is the last commit as the store encoded it: like a log,
	// on what the revision before had (wire), and folded back from those
	// bytes into used and calls, the whole used call IDs and journal.
	// prevUsed and prevCalls are what it was encoded on (an identical
	// retry is encoded on them again); used only ever grows in place past
	// prevUsed's length, or is a new slice.
	checkpoint []byte
	used       []string
	calls      []runtime.CallRecord
	prevUsed   []string
	prevCalls  []runtime.CallRecord
	done       bool
	// encoded counts the bytes of every commit as encoded, its appended
	// messages included (Stats).
	encoded int64
}

// wire is a commit as the store encodes it. Like the log's (events), a
// commit lists the used call IDs added since the revision before
// (UsedFrom: how many that one had) and only the calls it changed
// (events.CallDelta, at CallsAt) when CallsDelta: a run of n calls
// encodes O(n) bytes, not O(n²).
type wire struct {
	Checkpoint runtime.Checkpoint `json:"checkpoint"`
	UsedFrom   int                `json:"used_from,omitempty"`
	CallsDelta bool               `json:"calls_delta,omitempty"`
	CallsAt    []int              `json:"calls_at,omitempty"`
}

// encode returns cp as a commit on a revision whose used call IDs were
// used and whose journal was calls.
func encode(cp *runtime.Checkpoint, used []string, calls []runtime.CallRecord) ([]byte, error) {
	w := wire{Checkpoint: *cp}
	if n := len(used); n > 0 && len(cp.UsedCallIDs) >= n && slices.Equal(cp.UsedCallIDs[:n], used) {
		w.Checkpoint.UsedCallIDs, w.UsedFrom = cp.UsedCallIDs[n:], n
	}
	if changed, at, ok := events.CallDelta(calls, cp.Calls); ok {
		w.Checkpoint.Calls, w.CallsDelta, w.CallsAt = changed, true, at
	}
	return json.Marshal(&w)
}

// fold applies a commit encoded by encode to rd.
func (rd *runData) fold(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.UsedFrom > len(rd.used) {
		return fmt.Errorf("memory: a commit on %d used call IDs, the run has %d", w.UsedFrom, len(rd.used))
	}
	calls := w.Checkpoint.Calls
	if w.CallsDelta {
		var err error
		if calls, err = events.ApplyCalls(rd.calls, calls, w.CallsAt); err != nil {
			return err
		}
	}
	rd.prevUsed, rd.prevCalls = rd.used, rd.calls
	if w.UsedFrom == len(rd.used) {
		rd.used = append(rd.used, w.Checkpoint.UsedCallIDs...) // an identical retry reads the prefix
	} else {
		rd.used = append(rd.used[:w.UsedFrom:w.UsedFrom], w.Checkpoint.UsedCallIDs...)
	}
	rd.calls = calls
	rd.checkpoint, rd.revision, rd.done = b, w.Checkpoint.Revision, w.Checkpoint.Reply != nil
	return nil
}

// Stats reports the bytes the store encoded for every commit of every
// run (a checkpoint as encode makes it, and each appended message as the
// transcript keeps it).
func (db *DB) Stats() (encoded int64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, rd := range db.runs {
		encoded += rd.encoded
	}
	return encoded
}

// New returns an empty DB.
func New() *DB {
	return &DB{sessions: map[string]*sessionData{}, runs: map[string]*runData{}}
}

// Open acquires the lease of run in session and returns the store scoped to
// it. Every earlier handle of the run is fenced out (ErrLeaseLost). A run of
// a session whose admitted run has not completed is refused with
// ErrSessionBusy: continuations are serialized (C18).
func (db *DB) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if sessionID == "" || runID == "" {
		return nil, fmt.Errorf("memory: open: session and run IDs are required")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	s := db.sessions[sessionID]
	if s == nil {
		s = &sessionData{ids: map[string]bool{}}
		db.sessions[sessionID] = s
	}
	rd := db.runs[runID]
	if rd != nil && rd.session != sessionID {
		return nil, fmt.Errorf("memory: open: run %s belongs to session %s, not %s", runID, rd.session, sessionID)
	}
	done := rd != nil && rd.done
	// A completed run may be reopened to read its reply (C7); it does not
	// take the session.
	if !done && s.active != "" && s.active != runID {
		return nil, fmt.Errorf("memory: open run %s: %w (%s)", runID, runtime.ErrSessionBusy, s.active)
	}
	if rd == nil {
		rd = &runData{session: sessionID}
		db.runs[runID] = rd
	}
	if !done {
		s.active = runID
	}
	rd.epoch++
	return &Store{db: db, session: sessionID, run: runID, epoch: rd.epoch}, nil
}

// Store is a runtime.Store scoped to one run and its session.
type Store struct {
	db      *DB
	session string
	run     string
	epoch   int64
}

var (
	_ runtime.Store   = (*Store)(nil)
	_ session.Auditor = (*Store)(nil)
)

// op runs one operation under the DB lock.
func (s *Store) op(apply func(rd *runData, sd *sessionData) error) error {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	return apply(s.db.runs[s.run], s.db.sessions[s.session])
}

func (s *Store) fence(rd *runData) error {
	if rd.epoch != s.epoch {
		return fmt.Errorf("memory: run %s: lease epoch %d, current %d: %w", s.run, s.epoch, rd.epoch, runtime.ErrLeaseLost)
	}
	return nil
}

// LoadCheckpoint implements runtime.Store.
func (s *Store) LoadCheckpoint(ctx context.Context) (*runtime.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var cp *runtime.Checkpoint
	err := s.op(func(rd *runData, _ *sessionData) error {
		if rd.checkpoint == nil {
			return nil
		}
		var w wire
		if err := json.Unmarshal(rd.checkpoint, &w); err != nil {
			return err
		}
		cp = &w.Checkpoint
		cp.UsedCallIDs, cp.Calls = slices.Clone(rd.used), slices.Clone(rd.calls)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cp, nil
}

// SaveCheckpoint implements runtime.Store.
func (s *Store) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if cp == nil {
		return fmt.Errorf("memory: save checkpoint: nil checkpoint")
	}
	msgs := make([][]byte, len(cp.Append))
	for i, m := range cp.Append {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("memory: save checkpoint rev %d: append[%d]: %w", cp.Revision, i, err)
		}
		var err error
		if msgs[i], err = json.Marshal(m); err != nil {
			return fmt.Errorf("memory: save checkpoint: %w", err)
		}
	}
	return s.op(func(rd *runData, sd *sessionData) error {
		if err := s.fence(rd); err != nil {
			return err
		}
		switch {
		case cp.Revision == rd.revision && rd.revision > 0:
			b, err := encode(cp, rd.prevUsed, rd.prevCalls)
			if err == nil && bytes.Equal(b, rd.checkpoint) {
				return nil // identical retry: committed once (C13)
			}
			return fmt.Errorf("memory: save run %s rev %d: differs from the committed revision: %w", s.run, cp.Revision, runtime.ErrConflict)
		case cp.Revision != rd.revision+1:
			return fmt.Errorf("memory: save run %s rev %d: current revision is %d: %w", s.run, cp.Revision, rd.revision, runtime.ErrConflict)
		}
		if sd.active != s.run {
			return fmt.Errorf("memory: save run %s: %w (%s)", s.run, runtime.ErrSessionBusy, sd.active)
		}
		b, err := encode(cp, rd.used, rd.calls)
		if err != nil {
			return fmt.Errorf("memory: save checkpoint: %w", err)
		}
		for i, m := range cp.Append {
			if sd.ids[m.ID] {
				return fmt.Errorf("memory: save run %s rev %d: append[%d]: message %s already in the transcript: %w", s.run, cp.Revision, i, m.ID, runtime.ErrConflict)
			}
		}
		if err := rd.fold(b); err != nil {
			return fmt.Errorf("memory: save run %s rev %d: %w", s.run, cp.Revision, err)
		}
		rd.encoded += int64(len(b))
		for i, m := range cp.Append {
			sd.ids[m.ID] = true
			sd.history = append(sd.history, msgs[i])
			sd.window = append(sd.window, msgs[i])
			rd.encoded += int64(len(msgs[i]))
		}
		if cp.Reply != nil {
			sd.active = "" // the completed commit admits the next run
		}
		return nil
	})
}

// Load implements session.SessionStore.
func (s *Store) Load(ctx context.Context) ([]model.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []model.Message
	err := s.op(func(_ *runData, sd *sessionData) error {
		var err error
		out, err = decode(sd.window)
		return err
	})
	return out, err
}

// History implements session.Auditor.
func (s *Store) History(ctx context.Context) ([]model.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []model.Message
	err := s.op(func(_ *runData, sd *sessionData) error {
		var err error
		out, err = decode(sd.history)
		return err
	})
	return out, err
}

// Compactions returns the recorded compactions, oldest first (audit).
func (s *Store) Compactions() []session.Compaction {
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	var out []session.Compaction
	for _, b := range s.db.sessions[s.session].compactions {
		var c session.Compaction
		if err := json.Unmarshal(b, &c); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// Compact implements session.SessionStore.
func (s *Store) Compact(ctx context.Context, c session.Compaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	msgs := make([][]byte, len(c.Window))
	for i, m := range c.Window {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("memory: compact: window[%d]: %w", i, err)
		}
		var err error
		if msgs[i], err = json.Marshal(m); err != nil {
			return fmt.Errorf("memory: compact: %w", err)
		}
	}
	rec, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("memory: compact: %w", err)
	}
	return s.op(func(rd *runData, sd *sessionData) error {
		if err := s.fence(rd); err != nil {
			return err
		}
		if sd.active != s.run {
			return fmt.Errorf("memory: compact session %s: run %s is not the admitted run: %w", s.session, s.run, runtime.ErrSessionBusy)
		}
		last := ""
		if n := len(sd.window); n > 0 {
			var m struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(sd.window[n-1], &m); err != nil {
				return err
			}
			last = m.ID
		}
		if last != c.Through {
			return fmt.Errorf("memory: compact session %s: window ends with %q, not %q: %w", s.session, last, c.Through, runtime.ErrConflict)
		}
		sd.window = msgs
		sd.compactions = append(sd.compactions, rec)
		return nil
	})
}

func decode(raw [][]byte) ([]model.Message, error) {
	out := make([]model.Message, len(raw))
	for i, b := range raw {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			return nil, fmt.Errorf("memory: decode message: %w", err)
		}
	}
	return out, nil
}
