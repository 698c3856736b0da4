// Package wire is the schema of Cairn's log: the payload of every event
// type as each schema version writes it, in types of its own with their
// own JSON names. The log outlives every build that reads it, so its form
// is defined here and nowhere else: the runtime's structs (a checkpoint,
// a message, a compaction) may change as the loop needs, and what they
// encode to is held to these types by package events' tests
// (TestRuntimeEncodesAsWire), field by field.
//
// The package imports nothing of Cairn (TestWireImportsNoCairn), so no
// field of the log can be a type owned by another package again.
//
// The rule for a change: a field added with omitempty, which an older
// reader ignores without misreading the event, changes no version (usage,
// model_failures and result_id came that way, in version 1). Any other
// change (a field renamed, removed or retyped, or one an older reader
// would misread by ignoring it) is a new schema version: raise
// events.SchemaVersion, keep the forms the old version wrote (as
// CommitV1, CheckpointV1 and CallV1 are kept), add the new ones, the new
// version's reader and the upcaster from the version before
// (events/schema.go), and record the version's logs (go run
// ./test/recordlogs). testdata/wire-schema.golden in package events
// describes every version's types; a change of a type fails
// TestWireSchema until the description is written again with
//
//	go test ./events -run TestWireSchema -update
//
// which is the reviewer's view of the change.
package wire

import (
	"encoding/json"
	"time"
)

// Names: a type without a version in its name has had its form since
// version 1. A version that changes a form names the new one for itself
// (CommitV2) and the old one for the version that wrote it (CommitV1);
// Commit, Checkpoint and Call name this build's forms.

// CommitV1 is the payload of cairn.checkpoint.committed in schema version
// 1: a checkpoint revision that lists its call journal whole.
type CommitV1 struct {
	Checkpoint CheckpointV1 `json:"checkpoint"`
	// UsedCallIDsBase, when set, is the log sequence of an earlier
	// checkpoint event of the same run, at revision UsedCallIDsBaseRev,
	// that lists every call ID the run had used by then (and has no base
	// of its own); checkpoint.used_call_ids then lists only the IDs used
	// since, in order. The revision finds the base again in a copy of the
	// log whose sequences differ.
	UsedCallIDsBase    uint64 `json:"used_call_ids_base,omitempty"`
	UsedCallIDsBaseRev int64  `json:"used_call_ids_base_rev,omitempty"`
}

// CommitV2 is the payload of cairn.checkpoint.committed from schema
// version 2: version 1's, and a revision after its response's commit may
// list only the calls it changed.
type CommitV2 struct {
	Checkpoint         CheckpointV2 `json:"checkpoint"`
	UsedCallIDsBase    uint64       `json:"used_call_ids_base,omitempty"`
	UsedCallIDsBaseRev int64        `json:"used_call_ids_base_rev,omitempty"`
	// CallsBaseRev, when set, is the revision of the run that lists this
	// response's calls whole (the commit of the response), and CallsBase
	// its log sequence (0 where the writer has no sequences).
	// checkpoint.calls then lists only the calls changed from the revision
	// just before, without arguments, at the journal's indices CallsAt.
	// A version 1 reader would take those for the whole journal: this is
	// why they are version 2.
	CallsBase    uint64 `json:"calls_base,omitempty"`
	CallsBaseRev int64  `json:"calls_base_rev,omitempty"`
	CallsAt      []int  `json:"calls_at,omitempty"`
}

// CommitV4 is the payload of cairn.checkpoint.committed from schema
// version 4: version 2's, and the totals of the run's budget (Ledger)
// when the run keeps them in its own log. A reader of an earlier version
// would ignore them and count the run's budget from elsewhere, as if
// nothing were spent: this is why they are version 4.
type CommitV4 struct {
	Checkpoint         CheckpointV2 `json:"checkpoint"`
	UsedCallIDsBase    uint64       `json:"used_call_ids_base,omitempty"`
	UsedCallIDsBaseRev int64        `json:"used_call_ids_base_rev,omitempty"`
	CallsBase          uint64       `json:"calls_base,omitempty"`
	CallsBaseRev       int64        `json:"calls_base_rev,omitempty"`
	CallsAt            []int        `json:"calls_at,omitempty"`
	// Ledger, when set, is what the run's commits have charged its budget
	// with, up to and including this one: a root run that nothing else
	// draws on keeps its totals so, in the commits it makes anyway,
	// instead of in a write of their own.
	Ledger *Ledger `json:"ledger,omitempty"`
}

// Ledger is a run's budget as its commits charged it (CommitV4.Ledger):
// the model steps reserved and the tokens the provider reported. What
// was charged outside the commits (a reservation made on recovery, a
// compaction's tokens) is kept beside the log, and the run's totals are
// the sum.
type Ledger struct {
	Steps        int   `json:"steps"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// This build's forms.
type (
	// Commit is the payload of cairn.checkpoint.committed as this build
	// writes it.
	Commit = CommitV4
	// Checkpoint is a commit's checkpoint as this build writes it.
	Checkpoint = CheckpointV2
	// Call is a journaled call as this build writes it.
	Call = CallV2
)

// CheckpointV2 is one revision of a run's durable state: the "checkpoint"
// of a commit, from version 2. It holds exact tool arguments.
type CheckpointV2 struct {
	// Version is the checkpoint's own format (the runtime's
	// CheckpointVersion, part of its contract hash), not the log's.
	Version      int    `json:"version"`
	ContractHash string `json:"contract_hash"`
	// Revision starts at 1 and advances by exactly one.
	Revision int64  `json:"revision"`
	RunKey   string `json:"run_key"`
	// Phase is "model", "calls" or "completed".
	Phase string `json:"phase"`
	// Step counts committed model responses.
	Step int `json:"step"`
	// ResponseID is the assistant message whose calls are journaled.
	ResponseID string `json:"response_id,omitempty"`
	// Calls is the call journal of the current response (or, in a
	// commit on a listing, the calls changed).
	Calls []CallV2 `json:"calls,omitempty"`
	// UsedCallIDs are the tool-call IDs the run has used, in order (or,
	// on a base, those used since).
	UsedCallIDs []string `json:"used_call_ids,omitempty"`
	// Reply is set on the completed commit only.
	Reply *Reply `json:"reply,omitempty"`
	// Append is the transcript messages this commit adds.
	Append []Message `json:"append,omitempty"`
	// Usage and ModelFailures are set on a response commit only.
	Usage         *Usage    `json:"usage,omitempty"`
	ModelFailures []Failure `json:"model_failures,omitempty"`
}

// CallV2 is one journaled call, from version 2.
type CallV2 struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Args are the arguments as the model wrote them (JSON text, possibly
	// malformed); absent in a change of a listed call.
	Args string `json:"args,omitempty"`
	// State is "pending", "dispatching", "done", "error", "unknown" or
	// "skipped".
	State string `json:"state"`
	// ResultID names the call's tool result message.
	ResultID string `json:"result_id,omitempty"`
}

// CheckpointV1 is a commit's checkpoint in version 1: version 2's but for
// its calls (CallV1).
type CheckpointV1 struct {
	Version       int       `json:"version"`
	ContractHash  string    `json:"contract_hash"`
	Revision      int64     `json:"revision"`
	RunKey        string    `json:"run_key"`
	Phase         string    `json:"phase"`
	Step          int       `json:"step"`
	ResponseID    string    `json:"response_id,omitempty"`
	Calls         []CallV1  `json:"calls,omitempty"`
	UsedCallIDs   []string  `json:"used_call_ids,omitempty"`
	Reply         *Reply    `json:"reply,omitempty"`
	Append        []Message `json:"append,omitempty"`
	Usage         *Usage    `json:"usage,omitempty"`
	ModelFailures []Failure `json:"model_failures,omitempty"`
}

// CallV1 is a journaled call in version 1. The first builds of version 1
// journaled a finished call's whole tool result message (Result, the
// message the same commit appends); later ones name it (ResultID), and
// no version 1 event has both.
type CallV1 struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Args     string   `json:"args,omitempty"`
	State    string   `json:"state"`
	Result   *Message `json:"result,omitempty"`
	ResultID string   `json:"result_id,omitempty"`
}

// Reply is a completed run's answer.
type Reply struct {
	// Type is "output" or "needs_input".
	Type string `json:"type"`
	// Output is the value, valid against the output schema, its numbers
	// exact.
	Output   json.RawMessage `json:"output,omitempty"`
	Question string          `json:"question,omitempty"`
}

// Message is one transcript message. Meta is provider metadata, carried
// as bytes (base64 in JSON).
type Message struct {
	ID string `json:"id"`
	// Role is "user", "assistant" or "tool".
	Role  string            `json:"role"`
	Parts []Part            `json:"parts"`
	Meta  map[string][]byte `json:"meta,omitempty"`
}

// Part is one piece of a message; exactly one of the typed fields is set,
// matching Type ("text", "reasoning", "tool_call", "tool_result",
// "attachment").
type Part struct {
	Type       string            `json:"type"`
	Text       string            `json:"text,omitempty"`
	ToolCall   *ToolCall         `json:"tool_call,omitempty"`
	ToolResult *ToolResult       `json:"tool_result,omitempty"`
	Attachment *Attachment       `json:"attachment,omitempty"`
	Meta       map[string][]byte `json:"meta,omitempty"`
}

// ToolCall is a call the model asked for, its arguments as the provider
// sent them.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Args string `json:"args"`
}

// ToolResult answers the ToolCall with the same CallID.
type ToolResult struct {
	CallID      string       `json:"call_id"`
	Name        string       `json:"name"`
	Content     string       `json:"content"`
	IsError     bool         `json:"is_error,omitempty"`
	Attachments []Attachment `json:"attachments,omitempty"`
}

// Attachment references data the host stored.
type Attachment struct {
	Ref       string `json:"ref"`
	MediaType string `json:"media_type,omitempty"`
	Name      string `json:"name,omitempty"`
	Size      int64  `json:"size,omitempty"`
}

// Usage is what the provider reported for a response.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	ReasoningTokens   int64 `json:"reasoning_tokens,omitempty"`
}

// Failure is one failed request to a provider before a response came.
type Failure struct {
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	// Attempt counts the step's requests, from 1.
	Attempt int `json:"attempt"`
	// Status is the HTTP status; absent when there was no answer.
	Status int `json:"status,omitempty"`
	// Class is "status", "connection", "timeout" or "malformed".
	Class string `json:"class"`
	// Error is the adapter's error text, redacted.
	Error string `json:"error"`
	Retry bool   `json:"retry"`
	// RetryIn is the wait before the next attempt, in nanoseconds.
	RetryIn time.Duration `json:"retry_in,omitempty"`
	At      time.Time     `json:"at"`
}

// Compacted is the payload of cairn.window.compacted: a session's new
// context window, written by run RunID.
type Compacted struct {
	Compaction Compaction `json:"compaction"`
	RunID      string     `json:"run_id"`
}

// Compaction replaces a session's window.
type Compaction struct {
	// Through is the ID of the last message of the window replaced.
	Through string `json:"through"`
	// Window is the new window, oldest first.
	Window []Message `json:"window"`
	// Reason says why: "prune", "summary", "fork".
	Reason string `json:"reason,omitempty"`
}

// Run is the payload of cairn.run.created, the first event of a run: what
// it is and who started it. A record that names its definition version
// (Definition) is written at schema version 4 (events.DefinitionVersion);
// one that names none at version 1, as RunV1.
type Run struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	// Agent is the definition slug.
	Agent string `json:"agent"`
	// Message is the user message (a child's input JSON, or a prompt).
	Message string `json:"message"`
	// RootRunID is the run whose budget this run draws on (itself for a root).
	RootRunID string `json:"root_run_id"`
	// Parent fields are empty for a root run.
	ParentRunID     string `json:"parent_run_id,omitempty"`
	ParentSessionID string `json:"parent_session_id,omitempty"`
	ParentCallID    string `json:"parent_call_id,omitempty"`
	// Continues names the run this one continues in the same session.
	Continues string `json:"continues,omitempty"`
	// Owner is who started the root run (an API principal); children
	// inherit it. Every API request is authorized against it.
	Owner string `json:"owner,omitempty"`
	// ForkedFrom and ForkedAt name the run and revision a fork was made
	// from (projections/replay.Fork): the fork's session starts with a
	// copy of that run's commits up to ForkedAt.
	ForkedFrom string `json:"forked_from,omitempty"`
	ForkedAt   int64  `json:"forked_at,omitempty"`
	// Budget is a root run's budget as the node fixed it at creation:
	// the ledger's entry for the run is created from it by the run's first
	// reservation, and its deadline counts from the creation. Empty for
	// children (they draw on their root's) and for runs written outside a
	// node (a fork: adopting one opens its ledger entry).
	Budget *RunBudget `json:"budget,omitempty"`
	// Definition is the content address of the definition version the
	// run was admitted under (actors/definition): every member resumes
	// it under that version, whatever agent files it has. A child names
	// its parent's version (which holds the child's agent). Empty in
	// records written before runs were pinned, and in forks onto another
	// definition: those run under the agent's current definition.
	Definition string `json:"definition,omitempty"`
}

// RunV1 is the payload of cairn.run.created in schema versions 1 to 3, and
// in version 4 a record that names no definition version.
type RunV1 struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	// Agent is the definition slug.
	Agent string `json:"agent"`
	// Message is the user message (a child's input JSON, or a prompt).
	Message string `json:"message"`
	// RootRunID is the run whose budget this run draws on (itself for a root).
	RootRunID string `json:"root_run_id"`
	// Parent fields are empty for a root run.
	ParentRunID     string `json:"parent_run_id,omitempty"`
	ParentSessionID string `json:"parent_session_id,omitempty"`
	ParentCallID    string `json:"parent_call_id,omitempty"`
	// Continues names the run this one continues in the same session.
	Continues string `json:"continues,omitempty"`
	// Owner is who started the root run (an API principal); children
	// inherit it. Every API request is authorized against it.
	Owner string `json:"owner,omitempty"`
	// ForkedFrom and ForkedAt name the run and revision a fork was made
	// from (projections/replay.Fork): the fork's session starts with a
	// copy of that run's commits up to ForkedAt.
	ForkedFrom string `json:"forked_from,omitempty"`
	ForkedAt   int64  `json:"forked_at,omitempty"`
	// Budget is a root run's budget as the node fixed it at creation:
	// the ledger's entry for the run is created from it by the run's first
	// reservation, and its deadline counts from the creation. Empty for
	// children (they draw on their root's) and for runs written outside a
	// node (a fork: adopting one opens its ledger entry).
	Budget *RunBudget `json:"budget,omitempty"`
}

// RunBudget is a root run's limits; zero is unlimited.
type RunBudget struct {
	Steps  int   `json:"steps,omitempty"`
	Tokens int64 `json:"tokens,omitempty"`
	// Deadline is the wall-clock end, Unix nanoseconds.
	Deadline int64 `json:"deadline_unix_nano,omitempty"`
}

// Lease is the payload of cairn.lease.acquired: a new owner of a run,
// with its epoch.
type Lease struct {
	Holder string `json:"holder"`
	Epoch  int64  `json:"epoch"`
}

// Upgrade is the payload of cairn.run.upgraded (schema version 5): an
// operator moved a run from the definition version it ran under (From) to
// another (To), which it takes at its next model boundary: there its
// checkpoint is committed again under To's contract hash, and every
// attempt after runs under To.
type Upgrade struct {
	From string `json:"from"`
	To   string `json:"to"`
	// By is the API principal that asked; "" for none (a loopback node).
	By string `json:"by,omitempty"`
}

// Ended is the payload of cairn.run.ended: a run that did not complete.
type Ended struct {
	// Status is "cancelled" or "failed".
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// Purge is the payload of cairn.session.purged (schema version 3), the
// marker that remains of a session purged when its retention ran out.
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
	// store (the events' data_ref), removed with it.
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
	Created time.Time `json:"created,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
}
