package events

import "time"

// SessionPurged is the last event of a session whose retention ran out:
// the node purged every earlier event of the session from the log (a
// fenced, logged operation: docs/operations.md, Retention) and this marker
// is what remains. It says which runs the session had, how each ended and
// when it was purged, so the run index, the API and the run page can say
// "purged" instead of not found, and a continuation of the session is
// refused.
const SessionPurged Type = "cairn.session.purged"

// PurgeVersion is the schema version of a SessionPurged event: a build
// that reads less does not know the type. A cluster purges only once every
// member reads it (the level, operations.md Upgrades).
const PurgeVersion = 3

func init() { known[SessionPurged] = true }

// Purge is the payload of SessionPurged.
type Purge struct {
	// Runs are the session's runs as they ended, in creation order.
	Runs []PurgedRun `json:"runs"`
	// Before is the log sequence the purge removes the session's events
	// below: the marker's own sequence, known once it is written, is
	// always above it; Before is the session's last sequence the purge
	// was fenced on.
	Before uint64 `json:"before"`
	// Events and Bytes are what the session held in the log when purged.
	Events int   `json:"events"`
	Bytes  int64 `json:"bytes"`
	// Objects are the keys of the payloads the session kept in the object
	// store (events' data_ref), removed with it.
	Objects []string `json:"objects,omitempty"`
	// Retention is the age after its last event the session was kept, in
	// Go's duration syntax ("720h0m0s"), and Holder the node that purged.
	Retention string `json:"retention"`
	Holder    string `json:"holder,omitempty"`
}

// PurgedRun is one run of a purged session: its record's identity and how
// it ended.
type PurgedRun struct {
	RunID           string `json:"run_id"`
	Agent           string `json:"agent,omitempty"`
	Owner           string `json:"owner,omitempty"`
	RootRunID       string `json:"root_run_id,omitempty"`
	ParentRunID     string `json:"parent_run_id,omitempty"`
	ParentSessionID string `json:"parent_session_id,omitempty"`
	ParentCallID    string `json:"parent_call_id,omitempty"`
	Continues       string `json:"continues,omitempty"`
	// Status is how the run ended: completed, needs_input, failed or
	// cancelled.
	Status  string    `json:"status"`
	Created time.Time `json:"created"`
	Ended   time.Time `json:"ended"`
}

// SessionPurgedSubject is the subject of a session's purge marker.
func SessionPurgedSubject(sessionID string) string { return Prefix + ".sess." + sessionID + ".purged" }

// AllPurged matches every session's purge marker.
const AllPurged = Prefix + ".sess.*.purged"
