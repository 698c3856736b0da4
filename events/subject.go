package events

import (
	"fmt"
	"strings"
)

// Kind is what a subject of the log carries.
type Kind int

const (
	// KindStep is a checkpoint commit that does not complete its run.
	KindStep Kind = iota + 1
	// KindDone is the completed commit of a run: the one with its Reply.
	KindDone
	// KindCreated is a run's creation record.
	KindCreated
	// KindEnded is a run's end without a completed commit (failed,
	// cancelled, ended by a deadline).
	KindEnded
	// KindLease is one of a run's lease events.
	KindLease
	// KindCompaction is a session's compaction.
	KindCompaction
	// KindPurged is a session's purge marker (SessionPurged).
	KindPurged
	// KindUpgraded is one of a run's upgrades (RunUpgraded).
	KindUpgraded
)

var kindNames = [...]string{KindStep: "step", KindDone: "done", KindCreated: "created", KindEnded: "ended", KindLease: "lease", KindCompaction: "compaction", KindPurged: "purged", KindUpgraded: "upgraded"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Final reports whether the subject's event ends its run: the completed
// commit or the end record. A run has exactly one of them.
func (k Kind) Final() bool { return k == KindDone || k == KindEnded }

// Subject is a parsed subject of the log. RunID is empty for a session's
// compaction and purge marker.
type Subject struct {
	SessionID, RunID string
	Kind             Kind
}

// String is the subject itself: ParseSubject(s.String()) == s.
func (s Subject) String() string {
	switch s.Kind {
	case KindStep, KindDone:
		return CheckpointSubject(s.SessionID, s.RunID, s.Kind == KindDone)
	case KindCreated:
		return RunCreatedSubject(s.SessionID, s.RunID)
	case KindEnded:
		return RunEndedSubject(s.SessionID, s.RunID)
	case KindLease:
		return RunLease(s.SessionID, s.RunID)
	case KindCompaction:
		return SessionCompactions(s.SessionID)
	case KindPurged:
		return SessionPurgedSubject(s.SessionID)
	case KindUpgraded:
		return RunUpgradedSubject(s.SessionID, s.RunID)
	}
	return ""
}

// ParseSubject parses a literal subject of the log, the inverse of the
// subject builders of this package; every reader that needs a session, a
// run or a kind from a subject goes through it, so the layout has one
// definition. A subject of another layout is an error naming it.
func ParseSubject(subject string) (Subject, error) {
	bad := func(why string) (Subject, error) {
		return Subject{}, fmt.Errorf("%w: subject %q: %s", ErrMalformed, subject, why)
	}
	tok := strings.Split(subject, ".")
	if len(tok) < 4 || tok[0] != Prefix || tok[1] != "sess" || tok[2] == "" {
		return bad("want " + Prefix + ".sess.<session>.…")
	}
	for _, t := range tok {
		if t == "" || t == "*" || t == ">" {
			return bad("not a literal subject")
		}
	}
	s := Subject{SessionID: tok[2]}
	if len(tok) == 4 && tok[3] == "compact" {
		s.Kind = KindCompaction
		return s, nil
	}
	if len(tok) == 4 && tok[3] == "purged" {
		s.Kind = KindPurged
		return s, nil
	}
	if len(tok) < 6 || tok[3] != "run" {
		return bad("want ….run.<run>.<kind>, ….compact or ….purged")
	}
	s.RunID = tok[4]
	switch rest := strings.Join(tok[5:], "."); rest {
	case "c.step":
		s.Kind = KindStep
	case "c.done":
		s.Kind = KindDone
	case "created":
		s.Kind = KindCreated
	case "end":
		s.Kind = KindEnded
	case "lease":
		s.Kind = KindLease
	case "upgraded":
		s.Kind = KindUpgraded
	default:
		return bad("unknown kind " + rest)
	}
	return s, nil
}

// RunAnySession matches every event of a run whose session is not known.
func RunAnySession(runID string) string { return Prefix + ".sess.*.run." + runID + ".>" }

// RunCreatedAnySession matches a run's creation record whose session is
// not known.
func RunCreatedAnySession(runID string) string { return Prefix + ".sess.*.run." + runID + ".created" }

// AllCreated matches every run's creation record.
const AllCreated = Prefix + ".sess.*.run.*.created"

// AllLeases matches every run's lease events.
const AllLeases = Prefix + ".sess.*.run.*.lease"

// AllCompactions matches every session's compactions.
const AllCompactions = Prefix + ".sess.*.compact"

// All matches every subject of the log.
const All = Prefix + ".>"

// AllSessions matches every event of every session.
const AllSessions = Prefix + ".sess.>"
