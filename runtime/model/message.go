package model

import (
	"errors"
	"fmt"
)

// Role is who authored a message. System instructions are not a message:
// they travel in Request.System, so a transcript never carries them.
type Role string

// The roles a transcript holds.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// PartType discriminates the content of a Part.
type PartType string

// The part types. Reasoning parts carry a provider's thinking blocks so they
// can be sent back unchanged; their Meta holds the signatures.
const (
	PartText       PartType = "text"
	PartReasoning  PartType = "reasoning"
	PartToolCall   PartType = "tool_call"
	PartToolResult PartType = "tool_result"
	PartAttachment PartType = "attachment"
)

// Message is one entry of a conversation as the store keeps it. IDs are
// stable for the life of the session; Meta is provider metadata carried
// opaquely (C16): adapters put in what they need back on the next request
// (response IDs, item IDs) and get the same bytes back.
type Message struct {
	ID    string            `json:"id"`
	Role  Role              `json:"role"`
	Parts []Part            `json:"parts"`
	Meta  map[string][]byte `json:"meta,omitempty"`
}

// Part is one piece of multipart content. Exactly one of the typed fields is
// set, matching Type.
type Part struct {
	Type       PartType          `json:"type"`
	Text       string            `json:"text,omitempty"`
	ToolCall   *ToolCall         `json:"tool_call,omitempty"`
	ToolResult *ToolResult       `json:"tool_result,omitempty"`
	Attachment *Attachment       `json:"attachment,omitempty"`
	Meta       map[string][]byte `json:"meta,omitempty"`
}

// ToolCall is a call the model asked for. Args is the argument text exactly
// as the provider sent it: a string, not json.RawMessage, because the model
// may send malformed JSON that must still be stored (and answered with a
// tool error) and because re-encoding would change the provider's bytes.
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

// Attachment references data the host stored (object store key, URL of its
// own blob service). It is never JavaScript heap state (C16).
type Attachment struct {
	Ref       string `json:"ref"`
	MediaType string `json:"media_type,omitempty"`
	Name      string `json:"name,omitempty"`
	Size      int64  `json:"size,omitempty"`
}

// TextMessage builds a single-part text message.
func TextMessage(id string, role Role, text string) Message {
	return Message{ID: id, Role: role, Parts: []Part{{Type: PartText, Text: text}}}
}

// Text joins the message's text parts.
func (m Message) Text() string {
	var s string
	for _, p := range m.Parts {
		if p.Type == PartText {
			s += p.Text
		}
	}
	return s
}

// ToolCalls lists the message's tool calls in order.
func (m Message) ToolCalls() []ToolCall {
	var calls []ToolCall
	for _, p := range m.Parts {
		if p.Type == PartToolCall && p.ToolCall != nil {
			calls = append(calls, *p.ToolCall)
		}
	}
	return calls
}

// ErrMalformedMessage marks a message whose parts do not match their types.
var ErrMalformedMessage = errors.New("model: malformed message")

// Validate checks the structural invariants a store and an adapter rely on.
func (m Message) Validate() error {
	if m.ID == "" {
		return fmt.Errorf("%w: id is empty", ErrMalformedMessage)
	}
	switch m.Role {
	case RoleUser, RoleAssistant, RoleTool:
	default:
		return fmt.Errorf("%w: message %s: role %q is not user, assistant or tool", ErrMalformedMessage, m.ID, m.Role)
	}
	for i, p := range m.Parts {
		ok := false
		switch p.Type {
		case PartText, PartReasoning:
			ok = p.ToolCall == nil && p.ToolResult == nil && p.Attachment == nil
		case PartToolCall:
			ok = p.ToolCall != nil && p.ToolCall.ID != ""
		case PartToolResult:
			ok = p.ToolResult != nil && p.ToolResult.CallID != ""
		case PartAttachment:
			ok = p.Attachment != nil && p.Attachment.Ref != ""
		}
		if !ok {
			return fmt.Errorf("%w: message %s part %d: type %q does not match its content", ErrMalformedMessage, m.ID, i, p.Type)
		}
	}
	return nil
}
