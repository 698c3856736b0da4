package runtime

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/redact"
	"github.com/cairn-agents/cairn/runtime/session"
)

// AgentDefinition is the contract of an agent (the spec's
// wire.AgentDefinition).
type AgentDefinition struct {
	// Slug names the agent; children are spawned by slug.
	Slug        string `json:"slug"`
	Description string `json:"description,omitempty"`
	// Instructions are the system prompt.
	Instructions string `json:"instructions"`
	// InputSchema is the exact schema a parent's spawn call must satisfy. A
	// subagent must have one, and its top level must be an object.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// OutputSchema is the exact output contract of a completion.
	OutputSchema json.RawMessage `json:"output_schema"`
	// Subagents are the slugs this agent may spawn.
	Subagents []string `json:"subagents,omitempty"`
	// Capabilities are the capability names the agent asks for; the host
	// decides what it authorizes and passes that as Input.Capabilities.
	Capabilities []string `json:"capabilities,omitempty"`
	// ModelOptions are provider options passed through to the model.
	ModelOptions json.RawMessage `json:"model_options,omitempty"`
}

// Capability is one entry of the host-authorized JavaScript catalog (C4).
type Capability struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Effect is the capability's effect class: EffectReadOnly,
	// EffectIdempotent or EffectEffectful ("" counts as effectful). The
	// model is told it with every unknown-effect notice of a script.
	Effect string `json:"effect,omitempty"`
}

// The effect classes of a capability.
const (
	EffectReadOnly   = "read-only"
	EffectIdempotent = "idempotent"
	EffectEffectful  = "effectful"
)

// ModelLimits are the explicit limits of the model the run talks to.
type ModelLimits struct {
	// ContextTokens is the context window in tokens; required, > 0.
	ContextTokens int `json:"context_tokens"`
	// OutputTokens is reserved for the response and sent as the output
	// limit; required, > 0 and < ContextTokens.
	OutputTokens int `json:"output_tokens"`
	// MarginTokens is kept free for the token estimate's error; zero means
	// 5% of ContextTokens (at least 64).
	MarginTokens int `json:"margin_tokens,omitempty"`
}

// Budget is the run's hierarchical budget. The host enforces it durably
// (BeforeModel, its usage recorder); the runtime validates its shape (C33)
// and never resets the host's counters (C34).
type Budget struct {
	// Steps limits model requests; 0 is unlimited.
	Steps int `json:"steps,omitempty"`
	// Tokens limits reported input+output tokens; 0 is unlimited.
	Tokens int64 `json:"tokens,omitempty"`
	// Timeout limits wall-clock time across waits and restarts; 0 is none.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// IsZero reports whether no limit is set.
func (b Budget) IsZero() bool { return b == Budget{} }

// Input is everything one attempt of Run needs. See Run.
type Input struct {
	Definition AgentDefinition
	// Subagents must cover Definition.Subagents exactly (C3).
	Subagents   []AgentDefinition
	Model       model.Model
	ModelLimits ModelLimits
	// Budget is optional (zero: unlimited); an explicit one needs one
	// positive limit and no negative one (C33).
	Budget          Budget
	Store           Store
	Backend         Backend
	ExecutorFactory ExecutorFactory
	Controller      Controller
	Sink            Sink
	Redactor        Redactor
	// Message is the user message of a fresh run; ignored on resume (C2).
	Message string
	// Capabilities is the host-authorized JavaScript catalog (C4).
	Capabilities []Capability
	// RecoveryNotice is host context for the next model request (C5).
	RecoveryNotice string
	// Clock supplies time; nil means the system clock.
	Clock Clock
	// IDs supplies the run key chosen at revision 1; nil means random.
	IDs IDSource
	// Drain, when closed, stops the attempt at its next commit boundary
	// with ErrDrained: nothing in flight is interrupted (a graceful
	// shutdown). Cancelling ctx instead stops it at once.
	Drain <-chan struct{}
}

// Clock supplies the time. The loop reads it only for attribution and
// message timestamps, so a fixed clock makes commits byte-for-byte
// repeatable.
type Clock interface{ Now() time.Time }

// IDSource supplies the one random value of a run: its key, chosen at
// revision 1, from which every message ID is derived. Keys must differ
// between the runs of a session (a store rejects a message ID twice).
type IDSource interface{ NewID() string }

// Store is the run's durable state (C11-C18), scoped by the host to one run
// and its conversation, fenced by the host's lease.
type Store interface {
	session.SessionStore
	// LoadCheckpoint returns nil, nil only for a fresh run.
	LoadCheckpoint(ctx context.Context) (*Checkpoint, error)
	// SaveCheckpoint atomically appends cp.Append to the transcript and
	// replaces the checkpoint. Errors: ErrConflict, ErrLeaseLost,
	// ErrSessionBusy, or an I/O error (then the commit may or may not have
	// happened: recovery loads durable state).
	SaveCheckpoint(ctx context.Context, cp *Checkpoint) error
}

// Backend performs capability work for run_js callbacks.
type Backend = jstool.Backend

// ExecutorFactory allocates the JavaScript executor lazily (C41).
type ExecutorFactory = jstool.Factory

// Executor is one JavaScript realm.
type Executor = jstool.Executor

// Redactor removes secrets from text bound for a model, a sink, a log or
// JavaScript.
type Redactor = jstool.Redactor

// RedactorFunc adapts a function to Redactor.
type RedactorFunc func(string) string

// Redact implements Redactor.
func (f RedactorFunc) Redact(s string) string { return f(s) }

// Secrets is a Redactor that replaces every occurrence of each secret with
// [REDACTED], in every form package redact matches (JSON-escaped at any
// depth, percent-encoded, HTML entities, base64). Empty secrets are
// ignored. Build it from configured values with NewSecrets, which refuses
// placeholders and values too short to be secrets: every pattern here is
// replaced wherever it occurs.
//
// Secrets is the list; its Redact compiles it at every call, which suits
// tests and one-off use. Whatever redacts often (a node, a server) holds
// Compile's Set instead.
type Secrets []string

// Redact implements Redactor: Compile().Redact(text).
func (s Secrets) Redact(text string) string {
	if len(s) == 0 {
		return text
	}
	return s.Compile().Redact(text)
}

// Compile is s as a compiled redact.Set, a Redactor.
func (s Secrets) Compile() *redact.Set { return redact.New(s...) }

// Sink receives diagnostics after the commits they describe (C37). It is not
// the journal: events may be lost with a crash, never invented.
type Sink interface {
	Emit(ctx context.Context, ev SinkEvent)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, ev SinkEvent)

// Emit implements Sink.
func (f SinkFunc) Emit(ctx context.Context, ev SinkEvent) { f(ctx, ev) }

// SinkKind classifies sink events.
type SinkKind string

// The sink event kinds.
const (
	SinkText       SinkKind = "text"
	SinkToolCall   SinkKind = "tool_call"
	SinkToolResult SinkKind = "tool_result"
	SinkWaiting    SinkKind = "waiting"
	SinkCompleted  SinkKind = "completed"
	// SinkModelFailure is a failed request to the model's provider, sent
	// as it happens (while the step backs off, or as it gives up): it
	// describes no commit, so it may precede the one it delays. Failure
	// holds it whole; Text says it in one line.
	SinkModelFailure SinkKind = "model_failure"
)

// SinkEvent is one diagnostic. Text is redacted and complete.
type SinkEvent struct {
	Kind      SinkKind `json:"kind"`
	Revision  int64    `json:"revision"`
	MessageID string   `json:"message_id,omitempty"`
	CallID    string   `json:"call_id,omitempty"`
	Tool      string   `json:"tool,omitempty"`
	Text      string   `json:"text,omitempty"`
	IsError   bool     `json:"is_error,omitempty"`
	// Offered marks a SinkToolCall of a tool the run was offered (run_js,
	// complete, spawn_<slug>, the child controls): a name from the run's
	// catalog, not one the model made up. The loop sets it as it emits;
	// SinkEventsOf, which reads the commits alone, does not.
	Offered bool `json:"offered,omitempty"`
	// Failure is a SinkModelFailure's failed request.
	Failure *model.Failure `json:"failure,omitempty"`
}

// ReplyType discriminates a Reply.
type ReplyType string

// The reply types: both finish the run (C6).
const (
	ReplyOutput     ReplyType = "output"
	ReplyNeedsInput ReplyType = "needs_input"
)

// Reply is a completed run's answer.
type Reply struct {
	Type ReplyType `json:"type"`
	// Output is the value, valid against the definition's output schema,
	// with its JSON numbers exact.
	Output json.RawMessage `json:"output,omitempty"`
	// Question is the nonempty needs_input question.
	Question string `json:"question,omitempty"`
}

// Result is what Run returns with a completed or waiting run.
type Result struct {
	Reply   *Reply
	Waiting bool
	// WaitCallID is the wait_calls call a Waiting run parked on: the host
	// arms that wait's deadline, and no earlier one's.
	WaitCallID string
	// CleanupError is the executor teardown failure of this attempt, if
	// any. It never invalidates a committed reply and is never persisted (C8).
	CleanupError error
}
