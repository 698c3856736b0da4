package actors

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// Admission: how a root run comes to exist so that no crash loses it.
//
//  1. The run goes into the active set (the bucket every member's sweep
//     reads to find runs to resume) before anything else. When the set
//     refuses the write, the start fails with ErrUnavailable and nothing is
//     written.
//  2. Its record (RunCreated) is written, fenced on the session: sequence
//     0 for a new session, so a retry with the same idempotency key finds
//     the first run instead of making a second one.
//  3. It is woken.
//
// A crash after 1 leaves an entry with no record. Its attempts (a sweep
// wakes it) treat it as not yet created while the entry is younger than
// admitGrace (the start may still be writing the record; a client's retry
// writes it), and after that take it out of the set, writing nothing.

// admitGrace is how long an active-set entry may wait for its run's record
// before it is taken for a start that died after admitting it. A start
// writes its record within beginTimeout, well inside it.
const admitGrace = 2 * time.Minute

// errNotCreated: an attempt found its run in the active set with no record,
// admitted less than admitGrace ago. Retryable: the record may still come.
var errNotCreated = errors.New("actors: run not yet created")

// MaxIdempotencyKey is the longest idempotency key, in bytes.
const MaxIdempotencyKey = 255

// ErrIdempotencyConflict: an idempotency key was used before with other
// arguments. IdempotencyConflictError carries the key.
var ErrIdempotencyConflict = errors.New("actors: idempotency key reused with other arguments")

// IdempotencyConflictError reports an idempotency key that names a run
// started with another agent, message or owner; it matches
// ErrIdempotencyConflict.
type IdempotencyConflictError struct {
	Key string
	// What differs: "agent" or "message".
	Field string
}

func (e *IdempotencyConflictError) Error() string {
	return fmt.Sprintf("actors: idempotency key %q was used for a run with another %s", e.Key, e.Field)
}

// Is matches ErrIdempotencyConflict.
func (e *IdempotencyConflictError) Is(target error) bool { return target == ErrIdempotencyConflict }

// ValidIdempotencyKey checks a key: 1 to MaxIdempotencyKey bytes of
// printable ASCII (space to tilde). The error wraps ErrInvalid and says why.
func ValidIdempotencyKey(key string) error {
	if why := IdempotencyKeyProblem(key); why != "" {
		return fmt.Errorf("%w: idempotency key: %s", ErrInvalid, why)
	}
	return nil
}

// IdempotencyKeyProblem says what is wrong with a key ("" for a good one),
// for an API to name its own field.
func IdempotencyKeyProblem(key string) string {
	switch {
	case key == "":
		return "is empty"
	case len(key) > MaxIdempotencyKey:
		return fmt.Sprintf("is %d bytes, at most %d allowed", len(key), MaxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' {
			return fmt.Sprintf("byte %d (0x%02x) is not printable ASCII", i, c)
		}
	}
	return ""
}

// KeyedIDs derives the session and run IDs of the root run an owner starts
// with an idempotency key: every node derives the same ones, so a retry
// anywhere finds the first run. The hashed input is prefixed so that no
// (owner, key) pair names a child's IDs (ChildIDs hashes a run ID, which
// never is "idempotency").
func KeyedIDs(owner, key string) (sessionID, runID string) {
	h := sha256.Sum256([]byte("idempotency\x00" + owner + "\x00" + key))
	return "s" + hex.EncodeToString(h[:16]), "r" + hex.EncodeToString(h[16:32])
}

// StartRequest is a root run to start.
type StartRequest struct {
	// Owner is the API principal the run belongs to; "" for none.
	Owner string
	// Agent is the slug of a deployed agent; Message the user's task.
	Agent, Message string
	// IdempotencyKey, when not "", makes the start idempotent per owner:
	// the run's IDs derive from (Owner, IdempotencyKey), and a start with a
	// key used before returns that run (running or ended) when agent and
	// message match, or an IdempotencyConflictError when they do not.
	IdempotencyKey string
}

// Started is the run a StartRun made or found.
type Started struct {
	SessionID, RunID string
	// Existing: the idempotency key named a run started before; this call
	// started nothing.
	Existing bool
}

// StartRun starts a root run (see the admission steps above). Errors:
// ErrNotFound (the agent is not deployed), ErrInvalid (a message that is
// empty, not UTF-8 or not valid against the agent's input schema; a bad
// key), ErrTooLarge (a message above MaxMessageBytes), ErrIdempotencyConflict, ErrUnavailable (the active set refused the
// run; nothing was written); any other error leaves the outcome unknown,
// which a retry with the same key settles.
func (n *Node) StartRun(ctx context.Context, req StartRequest) (Started, error) {
	a, ok := n.agents[req.Agent]
	if !ok {
		return Started{}, fmt.Errorf("%w: agent %q is not deployed", ErrNotFound, req.Agent)
	}
	if err := checkMessage(a, n.inputs[req.Agent], req.Message); err != nil {
		return Started{}, err
	}
	keyed := req.IdempotencyKey != ""
	var s Started
	if keyed {
		if err := ValidIdempotencyKey(req.IdempotencyKey); err != nil {
			return Started{}, err
		}
		s.SessionID, s.RunID = KeyedIDs(req.Owner, req.IdempotencyKey)
		// A key whose run's session was purged: its record is gone (but
		// may still be in this node's cache of records, which a purge,
		// made by any member, does not clear), and a creation fenced at 0
		// would meet the marker. The marker is read first, from the log,
		// so that every member answers the same.
		if m, err := n.runlog.last(ctx, events.SessionPurgedSubject(s.SessionID)); err != nil {
			return Started{}, fmt.Errorf("actors: start with idempotency key %q: %w", req.IdempotencyKey, err)
		} else if m != nil {
			return Started{}, fmt.Errorf("%w: the run of idempotency key %q was purged, its retention having run out; use another key", ErrPurged, req.IdempotencyKey)
		}
		existing, err := n.runlog.readRun(ctx, s.SessionID, s.RunID)
		if err != nil {
			return Started{}, fmt.Errorf("actors: start with idempotency key %q: %w", req.IdempotencyKey, err)
		}
		if existing != nil {
			return n.existing(ctx, req, existing, false)
		}
	} else {
		s.SessionID, s.RunID = newID("s"), newID("r")
	}
	rec := events.Run{RunID: s.RunID, SessionID: s.SessionID, Agent: req.Agent, Message: req.Message, RootRunID: s.RunID, Owner: req.Owner,
		Budget: n.ledger.budgetOf(a.Budget), Definition: n.versions.current[req.Agent]}
	ctx, cancel := detached(ctx)
	defer cancel()
	if err := n.admit(ctx, s.SessionID, s.RunID); err != nil {
		return Started{}, err
	}
	create := n.runlog.createRun
	if keyed {
		create = n.createOnce
	}
	existing, err := create(ctx, rec, 0)
	if h := n.cfg.Hooks.Created; err == nil && h != nil {
		err = h(s.SessionID, s.RunID)
	}
	if err != nil {
		if errors.Is(err, errExists) && keyed {
			// A concurrent start with the same key wrote it first.
			return n.existing(ctx, req, existing, true)
		}
		n.wakeUnknownCreation(err, s.SessionID, s.RunID)
		return Started{}, err
	}
	n.wake(s.SessionID, s.RunID, lifecycle.ReasonStarted)
	return s, nil
}

// createOnce is log.createRun for a keyed run, whose IDs every start with
// its key shares: the write's Msg-Id is this start's own. With the
// record's usual one, JetStream would answer the second of two racing
// starts as a duplicate of the first, a success, and both would be told
// they created the run, though the record holds the first one's message.
// It returns errExists with the stored record when another start wrote it.
func (n *Node) createOnce(ctx context.Context, r events.Run, expectSeq uint64) (*events.Run, error) {
	ev, r, err := events.NewRun(r, n.runlog.now(), n.store.WriteVersion())
	if err != nil {
		return nil, err
	}
	err = n.runlog.publish(ctx, events.RunCreatedSubject(r.SessionID, r.RunID), ev, newID("created."+r.SessionID+"."+r.RunID+"."), expectSeq)
	if !errors.Is(err, runtime.ErrConflict) {
		if err != nil {
			return nil, err
		}
		return &r, nil
	}
	existing, rerr := n.runlog.readRun(ctx, r.SessionID, r.RunID)
	if rerr != nil {
		return nil, rerr
	}
	if existing != nil {
		return existing, errExists
	}
	return nil, err
}

// existing answers a keyed start that found its run's record: that run
// when the start asks for the same one, a conflict otherwise. A run still
// active is woken (a start that wrote its record may have died before
// waking it; a wake is idempotent), and so is one this start put back in
// the active set (marked), whose attempt takes it out again if it ended.
func (n *Node) existing(ctx context.Context, req StartRequest, rec *events.Run, marked bool) (Started, error) {
	switch {
	case rec.Agent != req.Agent:
		return Started{}, &IdempotencyConflictError{Key: req.IdempotencyKey, Field: "agent"}
	case rec.Message != req.Message:
		return Started{}, &IdempotencyConflictError{Key: req.IdempotencyKey, Field: "message"}
	case rec.Owner != req.Owner: // the IDs hash the owner: a collision, or a record not made by StartRun
		return Started{}, &IdempotencyConflictError{Key: req.IdempotencyKey, Field: "owner"}
	}
	wake := marked
	if !wake {
		st, err := n.runlog.status(ctx, rec.SessionID, rec.RunID)
		if err != nil {
			return Started{}, err
		}
		wake = st.Status.Active()
	}
	if wake {
		if !marked {
			// The first start's entry may be gone (its node's clock ran
			// ahead and a sweep settled it before the record landed): a
			// running run outside the active set is one no sweep finds.
			// Putting it back is idempotent.
			if err := n.markActive(ctx, rec.SessionID, rec.RunID); err != nil {
				return Started{}, err
			}
		}
		n.wake(rec.SessionID, rec.RunID, lifecycle.ReasonStarted)
	}
	return Started{SessionID: rec.SessionID, RunID: rec.RunID, Existing: true}, nil
}

// wakeUnknownCreation wakes a run whose record's write failed in a way
// that does not say it was refused (a publish buffered across a reconnect
// and flushed later, a lost acknowledgement that could not be settled):
// the record may land after the caller is told it failed. Its attempt runs
// it if it did. Otherwise, with an entry in the earlier builds' active set
// (activeKV), it waits while the record still may come (NotYetCreated,
// within admitGrace) and then takes the entry out with nothing written;
// without one it ends at once, and the active set (derived from the log)
// wakes the run again when its record lands. Without the wakes, a record
// that landed late is a run nothing ever starts (on a node alone, no
// sweep comes).
func (n *Node) wakeUnknownCreation(err error, sessionID, runID string) {
	if errors.Is(err, runtime.ErrConflict) || errors.Is(err, errExists) || errors.Is(err, ErrInvalid) {
		return // refused: no record will land
	}
	n.wake(sessionID, runID, lifecycle.ReasonStarted)
	// Outside the earlier builds' active set (activeKV), nothing keeps the
	// run waiting for its record: the index wakes it when it lands.
	if !n.actives.await(sessionID, runID, n.now(), func() { n.wake(sessionID, runID, lifecycle.ReasonStarted) }) {
		n.logger.Warn("actors: too many starts of unknown outcome awaited; a sweep will find this one if its record lands", "run", runID, "session", sessionID)
	}
}

// admit puts a run the API starts in the earlier builds' active set, before
// its record is written, while that set is written (activeKV; otherwise it
// writes nothing: the record itself puts the run in the active set derived
// from the log). A refused write refuses the run (ErrUnavailable), with
// nothing written.
func (n *Node) admit(ctx context.Context, sessionID, runID string) error {
	if err := n.markActive(ctx, sessionID, runID); err != nil {
		return fmt.Errorf("%w: the active set refused run %s: %w", ErrUnavailable, runID, err)
	}
	if h := n.cfg.Hooks.Admitted; h != nil {
		if err := h(sessionID, runID); err != nil {
			return fmt.Errorf("actors: admitted %s: %w", runID, err)
		}
	}
	return nil
}

// unrecorded decides what becomes of a run in the active set with no
// record: errNotCreated while its entry is younger than admitGrace (by the
// node's clock against the entry's time), and past it the entry is removed
// (fenced on its revision, so a retry that admitted the run again since
// keeps it) and the activation ends (errEnded) with nothing written to the
// log. With no entry either there is nothing to run (errEnded).
func (n *Node) unrecorded(ctx context.Context, sessionID, runID string) error {
	gone, age, err := n.settleUnrecorded(ctx, sessionID, runID)
	switch {
	case err != nil:
		return err
	case gone:
		n.logger.Info("actors: a run admitted without a record was dropped from the active set", "run", runID, "session", sessionID, "age", age)
		return fmt.Errorf("%w: run %s was admitted but never created", errEnded, runID)
	}
	return fmt.Errorf("%w: run %s, admitted %s ago", errNotCreated, runID, age.Round(time.Millisecond))
}

// settleUnrecorded removes the active-set entry of a run with no record
// once it is older than admitGrace; gone reports that no entry is left. The
// caller has read that the run has no record; if it has one by now, the
// entry stays (gone is false). The sweep and an attempt may settle the same
// entry at once: the one whose purge is fenced out reads the entry again
// and finds it gone, which is the outcome it wanted, not an error.
func (n *Node) settleUnrecorded(ctx context.Context, sessionID, runID string) (gone bool, age time.Duration, err error) {
	for try := 0; ; try++ {
		m, err := n.activeW.w.Last(ctx, n.activeW.subject(runID))
		if err != nil {
			return false, 0, fmt.Errorf("actors: run %s has no record; read its active-set entry: %w", runID, err)
		}
		if m == nil {
			return true, 0, nil
		}
		if op := m.Header.Get(kvOperation); op == kvOperationDel || op == kvOperationPurge {
			return true, 0, nil
		}
		age = n.now().Sub(m.Time)
		if age < admitGrace {
			return false, age, nil
		}
		// The entry's time is the server's; this node's clock may run
		// ahead of it (a clock that is behind only makes it wait longer).
		// Before dropping an entry, its age is taken again on the
		// server's clock.
		now, err := n.serverClock(ctx)
		if err != nil {
			return false, age, fmt.Errorf("actors: run %s has no record; read the server's clock: %w", runID, err)
		}
		if age = now.Sub(m.Time); age < admitGrace {
			return false, age, nil
		}
		// The record may have landed since the caller read none.
		if rec, err := n.runlog.readRun(ctx, sessionID, runID); err != nil || rec != nil {
			return false, age, err
		}
		err = n.activeW.purge(ctx, runID, activeMarkerTTL, m.Sequence)
		if err == nil {
			return true, age, nil
		}
		if !errors.Is(err, runtime.ErrConflict) || try == 2 {
			return false, age, fmt.Errorf("actors: drop run %s, admitted %s ago with no record, from the active set: %w", runID, age.Round(time.Second), err)
		}
	}
}
