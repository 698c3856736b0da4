// Package session holds what the run loop needs of a conversation: the
// SessionStore contract (the current window and its compaction) and the
// token estimate used to decide when to compact.
package session

import (
	"context"

	"github.com/cairn-agents/cairn/runtime/model"
)

// SessionStore is the conversation side of a run's store. The host scopes it
// to one session and fences it with the same lease as the run's checkpoints.
type SessionStore interface {
	// Load returns the current context window, oldest first: the window of
	// the last compaction followed by every message appended since.
	Load(ctx context.Context) ([]model.Message, error)
	// Compact atomically replaces the window (C15). The full transcript stays
	// readable (History); the replaced window must end with Through, or the
	// store answers with a conflict and changes nothing. It is fenced by the
	// run's lease and is not a checkpoint revision.
	Compact(ctx context.Context, c Compaction) error
}

// Compaction replaces a window.
type Compaction struct {
	// Through is the ID of the last message of the window being replaced.
	Through string `json:"through"`
	// Window is the new window, oldest first.
	Window []model.Message `json:"window"`
	// Reason says why (for audit): "prune", "summary".
	Reason string `json:"reason,omitempty"`
}

// Auditor is implemented by stores that can return the full transcript of a
// session, every message ever appended, in order, compactions regardless.
// The conformance suite requires it of every store.
type Auditor interface {
	History(ctx context.Context) ([]model.Message, error)
}
