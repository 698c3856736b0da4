package model

import (
	"context"
	"encoding/json"
	"errors"
)

// Model answers one request with one complete response. Tool definitions in
// the request never execute anything: the runtime executes the saved calls
// itself, after the response is committed (C32).
//
// Generate may return a non-nil Response together with an error when the
// provider reported usage for a request that then failed (an interrupted
// stream): the usage wrapper records it (C34); the runtime ignores the rest.
type Model interface {
	Generate(ctx context.Context, req Request) (*Response, error)
}

// Purpose says why a request is made. Budgets count both kinds (C24).
type Purpose string

// The request purposes.
const (
	PurposeStep       Purpose = "step"
	PurposeCompaction Purpose = "compaction"
)

// Request is everything a provider needs for one call.
type Request struct {
	Purpose         Purpose
	System          string
	Messages        []Message
	Tools           []ToolDef
	MaxOutputTokens int
	// Options are provider options from the agent definition (temperature,
	// reasoning effort...), passed through as JSON.
	Options json.RawMessage
}

// ToolDef describes a tool the model may call. InputSchema is shown to the
// model unchanged.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Response is one complete model response. Message.Role is assistant; its ID
// may be empty (the runtime assigns IDs); tool call IDs come from the provider.
type Response struct {
	Message    Message
	Usage      Usage
	StopReason string
}

// Usage is what the provider reported. Zero means not reported.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	ReasoningTokens   int64 `json:"reasoning_tokens,omitempty"`
}

// Add returns the sum of two usages.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:       u.InputTokens + v.InputTokens,
		OutputTokens:      u.OutputTokens + v.OutputTokens,
		CachedInputTokens: u.CachedInputTokens + v.CachedInputTokens,
		ReasoningTokens:   u.ReasoningTokens + v.ReasoningTokens,
	}
}

// UsageRecorder durably records reported usage. The host implements it with
// its budget counters (C34).
type UsageRecorder interface {
	RecordUsage(ctx context.Context, purpose Purpose, u Usage) error
}

// ResponseRecorder is a UsageRecorder shown the whole response whose usage
// it records, when the request succeeded: a host may do more in the same
// durable write (the node reserves the budget of the step that follows a
// response that goes on, so that step's reservation costs no write of its
// own).
type ResponseRecorder interface {
	UsageRecorder
	RecordResponse(ctx context.Context, purpose Purpose, resp *Response) error
}

// WithUsage wraps m so that every reported usage, of failed and compaction
// requests too, reaches rec before the caller sees the response (C34). A
// recording failure is returned joined with any model error: the host's
// counters are authoritative, so a response whose usage could not be
// recorded is not used.
func WithUsage(m Model, rec UsageRecorder) Model { return usageModel{m: m, rec: rec} }

type usageModel struct {
	m   Model
	rec UsageRecorder
}

func (u usageModel) Generate(ctx context.Context, req Request) (*Response, error) {
	resp, err := u.m.Generate(ctx, req)
	if resp != nil && resp.Usage != (Usage{}) {
		// Record with a context that survives the caller's cancellation:
		// an interrupted request still spent its tokens.
		var rerr error
		if rr, ok := u.rec.(ResponseRecorder); ok && err == nil {
			rerr = rr.RecordResponse(context.WithoutCancel(ctx), req.Purpose, resp)
		} else {
			rerr = u.rec.RecordUsage(context.WithoutCancel(ctx), req.Purpose, resp.Usage)
		}
		if rerr != nil {
			return nil, errors.Join(err, rerr)
		}
	}
	return resp, err
}
