package runtime

import "github.com/cairn-agents/cairn/runtime/model"

// CheckpointVersion is the checkpoint format this package writes and reads.
// It is part of the ContractHash.
const CheckpointVersion = 1

// Phase is where the run stands.
type Phase string

// The phases.
const (
	// PhaseModel: the next action is a model request. A checkpoint in this
	// phase is the model checkpoint, saved before BeforeModel (C35).
	PhaseModel Phase = "model"
	// PhaseCalls: the journal holds a committed response's calls.
	PhaseCalls Phase = "calls"
	// PhaseCompleted: Reply is set; the run is finished.
	PhaseCompleted Phase = "completed"
)

// CallState is the state of one journaled call.
type CallState string

// The call states. Dispatching is the predispatch checkpoint; the others are
// postresult states (C19).
const (
	CallPending     CallState = "pending"
	CallDispatching CallState = "dispatching"
	CallDone        CallState = "done"
	CallError       CallState = "error"
	CallUnknown     CallState = "unknown"
	CallSkipped     CallState = "skipped"
)

// Terminal reports whether the call has its postresult.
func (s CallState) Terminal() bool {
	return s == CallDone || s == CallError || s == CallUnknown || s == CallSkipped
}

// Checkpoint is one revision of a run's durable state. Stores must preserve
// every field (C11). It holds exact tool arguments: protect it like any
// execution record (C18).
type Checkpoint struct {
	Version      int    `json:"version"`
	ContractHash string `json:"contract_hash"`
	// Revision starts at 1 and advances by exactly one (C13).
	Revision int64 `json:"revision"`
	// RunKey is chosen at revision 1; message IDs derive from it.
	RunKey string `json:"run_key"`
	Phase  Phase  `json:"phase"`
	// Step counts committed model responses.
	Step int `json:"step"`
	// ResponseID is the assistant message whose calls are journaled.
	ResponseID string `json:"response_id,omitempty"`
	// Calls is the call journal of the current response.
	Calls []CallRecord `json:"calls,omitempty"`
	// UsedCallIDs are every tool-call ID this run has journaled.
	UsedCallIDs []string `json:"used_call_ids,omitempty"`
	Reply       *Reply   `json:"reply,omitempty"`
	// Append is the transcript payload of this revision's commit (C12, C14).
	Append []model.Message `json:"append,omitempty"`
	// Usage is what the provider reported for the response this revision
	// commits; set on response commits only, like Append it belongs to this
	// revision and is not carried forward. The host's budget ledger is the
	// authority on spending (C34); this makes tokens readable from the log
	// (usage read models, replay).
	Usage *model.Usage `json:"usage,omitempty"`
	// ModelFailures are the failed provider requests the response this
	// revision commits cost before it came (a 503 retried, a timeout), so
	// the log shows every request a step made, not only the last; set on
	// response commits only, and not carried forward, like Usage.
	ModelFailures []model.Failure `json:"model_failures,omitempty"`
}

// CallRecord is one journaled call.
type CallRecord struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Args are the call's arguments as the model wrote them (JSON). A
	// commit that only changes a call's state lists it without them
	// (events.CallDelta).
	Args  string    `json:"args,omitempty"`
	State CallState `json:"state"`
	// ResultID names the call's tool result message in the transcript,
	// appended by its postresult commit.
	ResultID string `json:"result_id,omitempty"`
}

// clone starts the next commit from cp. It drops Append: a loaded or
// just-saved checkpoint still holds its own payload, which must never be
// committed again (C14).
func (cp *Checkpoint) clone() *Checkpoint {
	c := *cp
	c.Calls = append([]CallRecord(nil), cp.Calls...)
	c.UsedCallIDs = append([]string(nil), cp.UsedCallIDs...)
	c.Append = nil
	c.Usage = nil
	c.ModelFailures = nil
	return &c
}
