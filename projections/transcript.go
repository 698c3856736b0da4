package projections

import (
	"encoding/json"
	"sync"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime/model"
)

// TranscriptEntry is one message of a session's transcript.
type TranscriptEntry struct {
	Seq      uint64        `json:"seq"`
	RunID    string        `json:"run_id"`
	Revision int64         `json:"revision"`
	Message  model.Message `json:"message"`
}

// TranscriptCompaction is one compaction of a session's window.
type TranscriptCompaction struct {
	Seq    uint64 `json:"seq"`
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
	// Through is the last message the compaction covered; At is how many
	// transcript entries preceded it.
	Through string `json:"through"`
	At      int    `json:"at"`
	// Window is the window that replaced everything through Through.
	Window []model.Message `json:"window"`
}

// Session is one session's transcript: every message ever appended (the
// audit history) and its compactions.
type Session struct {
	SessionID   string                 `json:"session_id"`
	Entries     []TranscriptEntry      `json:"entries"`
	Compactions []TranscriptCompaction `json:"compactions,omitempty"`
}

// Window is the session's current context window: the last compaction's
// window and every message appended after it.
func (s Session) Window() []model.Message {
	var w []model.Message
	from := 0
	if n := len(s.Compactions); n > 0 {
		c := s.Compactions[n-1]
		w, from = append(w, c.Window...), c.At
	}
	for _, e := range s.Entries[from:] {
		w = append(w, e.Message)
	}
	return w
}

// Transcripts is the transcript read model: sessions with their messages
// and compactions. It holds every message of every session it follows, so
// a node builds it for one session on demand (NewTranscripts with that
// session) rather than for the whole log.
type Transcripts struct {
	// followed is the one session followed; "*" for all of them.
	followed string
	mu       sync.RWMutex
	sessions map[string]*Session
}

// NewTranscripts follows one session, or every session when sessionID is
// "".
func NewTranscripts(sessionID string) *Transcripts {
	if sessionID == "" {
		sessionID = "*"
	}
	return &Transcripts{followed: sessionID, sessions: map[string]*Session{}}
}

var _ Projection = (*Transcripts)(nil)

// Name implements Projection.
func (t *Transcripts) Name() string { return "transcripts" }

// Filters implements Projection.
func (t *Transcripts) Filters() []string {
	return []string{events.SessionCheckpoints(t.followed), events.SessionCompactions(t.followed)}
}

func (t *Transcripts) session(id string) *Session {
	s := t.sessions[id]
	if s == nil {
		s = &Session{SessionID: id, Entries: []TranscriptEntry{}}
		t.sessions[id] = s
	}
	return s
}

// Apply implements Projection.
func (t *Transcripts) Apply(e Event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Type {
	case events.CheckpointCommitted:
		cp, err := e.Checkpoint()
		if err != nil {
			return nil
		}
		s := t.session(e.SessionID)
		for _, m := range cp.Append {
			s.Entries = append(s.Entries, TranscriptEntry{Seq: e.Seq, RunID: e.RunID, Revision: cp.Revision, Message: m})
		}
	case events.WindowCompacted:
		var c events.Compaction
		if e.Payload(&c) != nil {
			return nil
		}
		s := t.session(e.SessionID)
		s.Compactions = append(s.Compactions, TranscriptCompaction{Seq: e.Seq, RunID: c.RunID, Reason: c.Compaction.Reason,
			Through: c.Compaction.Through, At: len(s.Entries), Window: c.Compaction.Window})
	}
	return nil
}

// Snapshot implements Projection.
func (t *Transcripts) Snapshot() ([]byte, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return json.Marshal(t.sessions)
}

// Restore implements Projection.
func (t *Transcripts) Restore(b []byte) error {
	s := map[string]*Session{}
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sessions = s
	return nil
}

// Session returns a session's transcript.
func (t *Transcripts) Session(id string) (Session, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s, ok := t.sessions[id]
	if !ok {
		return Session{}, false
	}
	c := *s
	c.Entries = append([]TranscriptEntry(nil), s.Entries...)
	c.Compactions = append([]TranscriptCompaction(nil), s.Compactions...)
	return c, true
}
