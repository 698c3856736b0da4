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
	"sync"

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
	session    string
	epoch      int64
	checkpoint []byte
	revision   int64
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
	done := rd != nil && completed(rd.checkpoint)
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

func completed(cp []byte) bool {
	if cp == nil {
		return false
	}
	var c struct {
		Reply json.RawMessage `json:"reply"`
	}
	return json.Unmarshal(cp, &c) == nil && len(c.Reply) > 0 && string(c.Reply) != "null"
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
		cp = new(runtime.Checkpoint)
		return json.Unmarshal(rd.checkpoint, cp)
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
	b, err := json.Marshal(cp)
	if err != nil {
		return fmt.Errorf("memory: save checkpoint: %w", err)
	}
	msgs := make([][]byte, len(cp.Append))
	for i, m := range cp.Append {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("memory: save checkpoint rev %d: append[%d]: %w", cp.Revision, i, err)
		}
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
			if bytes.Equal(b, rd.checkpoint) {
				return nil // identical retry: committed once (C13)
			}
			return fmt.Errorf("memory: save run %s rev %d: differs from the committed revision: %w", s.run, cp.Revision, runtime.ErrConflict)
		case cp.Revision != rd.revision+1:
			return fmt.Errorf("memory: save run %s rev %d: current revision is %d: %w", s.run, cp.Revision, rd.revision, runtime.ErrConflict)
		}
		if sd.active != s.run {
			return fmt.Errorf("memory: save run %s: %w (%s)", s.run, runtime.ErrSessionBusy, sd.active)
		}
		for i, m := range cp.Append {
			if sd.ids[m.ID] {
				return fmt.Errorf("memory: save run %s rev %d: append[%d]: message %s already in the transcript: %w", s.run, cp.Revision, i, m.ID, runtime.ErrConflict)
			}
		}
		for i, m := range cp.Append {
			sd.ids[m.ID] = true
			sd.history = append(sd.history, msgs[i])
			sd.window = append(sd.window, msgs[i])
		}
		rd.checkpoint, rd.revision = b, cp.Revision
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
