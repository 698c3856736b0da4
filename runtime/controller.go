package runtime

import (
	"context"
	"time"
)

// Controller is the host side of the run: budgets and child runs. All of it
// is scoped by the host, never by IDs the model supplies (C10).
type Controller interface {
	// BeforeModel durably reserves budget before any model work, compaction
	// included (C24). An error ends the attempt.
	BeforeModel(ctx context.Context) error
	// Spawn starts a child; deduplicated by parent run + toolCallID, with
	// the input checked to match on a repeat (C25).
	Spawn(ctx context.Context, toolCallID, definitionSlug string, input []byte) (AgentRunInfo, error)
	// Continue starts a new child run in a completed child session (C26).
	Continue(ctx context.Context, toolCallID, sessionID, prompt string) (AgentRunInfo, error)
	// Get inspects owned calls (C27).
	Get(ctx context.Context, ids []string) ([]CallInfo, error)
	// Cancel cancels owned calls under host policy (C27).
	Cancel(ctx context.Context, ids []string) ([]CancelInfo, error)
	// Wait returns the result if it is ready or the deadline passed;
	// otherwise it durably records the dependencies and the original
	// deadline and returns an error wrapping ErrWaiting (C28).
	Wait(ctx context.Context, toolCallID string, req WaitRequest) (WaitResult, error)
	// Complete validates completion policy; an identical replay is accepted
	// (C29). Its error becomes a tool error unless it is a FatalToolError.
	Complete(ctx context.Context, reply Reply) error
}

// CallStatus is the state of a child call.
type CallStatus string

// The child call states.
const (
	StatusRunning   CallStatus = "running"
	StatusWaiting   CallStatus = "waiting"
	StatusCompleted CallStatus = "completed"
	StatusFailed    CallStatus = "failed"
	StatusCancelled CallStatus = "cancelled"
	// StatusParked is a run a node cannot move: its log holds an event of
	// a schema version newer than the node's build reads. It is shown to
	// operators (the HTTP API) only; a node of a newer build resumes it.
	StatusParked CallStatus = "parked"
	// StatusPurged is a run whose session the node purged once its
	// retention ran out (docs/operations.md, Retention): its events are
	// gone from the log, and the run index keeps how it ended. It is shown
	// to operators and users (the HTTP API, the run page) only.
	StatusPurged CallStatus = "purged"
)

// Active reports whether the call has not finished.
func (s CallStatus) Active() bool {
	return s == StatusRunning || s == StatusWaiting || s == StatusParked
}

// StatusNeedsInput is the status a run shows, to its operators and users,
// when it completed with a needs_input reply: it ended, asking a question
// that a new run in its session answers. The run index, the HTTP API, the
// CLI, the run page and the MCP tools show it; a parent's call of such a
// run is completed all the same (its reply says needs_input), and the log
// records a completion.
const StatusNeedsInput CallStatus = "needs_input"

// RunStatus is the status a run shows: StatusNeedsInput for a completion
// with a needs_input reply, st otherwise.
func RunStatus(st CallStatus, reply *Reply) CallStatus {
	if st == StatusCompleted && reply != nil && reply.Type == ReplyNeedsInput {
		return StatusNeedsInput
	}
	return st
}

// AgentRunInfo is the durable handle of a child run. CallID, the tool-call ID
// that spawned it, is the handle the model uses with get/wait/cancel.
type AgentRunInfo struct {
	CallID    string     `json:"call_id"`
	RunID     string     `json:"run_id"`
	SessionID string     `json:"session_id"`
	Agent     string     `json:"agent"`
	Status    CallStatus `json:"status"`
}

// CallInfo is what get/wait report of a child call.
type CallInfo struct {
	AgentRunInfo
	Reply *Reply `json:"reply,omitempty"`
	Error string `json:"error,omitempty"`
}

// CancelInfo reports one cancellation.
type CancelInfo struct {
	CallID    string     `json:"call_id"`
	Cancelled bool       `json:"cancelled"`
	Status    CallStatus `json:"status"`
	Reason    string     `json:"reason,omitempty"`
}

// WaitMode says when a wait is satisfied.
type WaitMode string

// The wait modes.
const (
	WaitAll WaitMode = "all"
	WaitAny WaitMode = "any"
)

// WaitRequest is the model's wait_calls, decoded.
type WaitRequest struct {
	CallIDs []string `json:"ids"`
	Mode    WaitMode `json:"mode"`
	// Timeout counts from the first Wait of this tool call: the controller
	// keeps the original deadline across parking and restarts (C28). Zero
	// means no timeout.
	Timeout time.Duration `json:"timeout"`
}

// WaitResult is the outcome of a satisfied or timed-out wait. A timeout
// cancels nothing (C28).
type WaitResult struct {
	TimedOut bool       `json:"timed_out"`
	Calls    []CallInfo `json:"calls"`
}
