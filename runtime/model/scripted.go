package model

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrUnexpectedRequest is returned by Scripted when the script has no answer
// for a request.
var ErrUnexpectedRequest = errors.New("model: scripted model got an unexpected request")

// Scripted is a deterministic model for tests and offline demos. Its answer
// to a step request depends only on the request: it finds the last
// assistant message of the request in its script and answers with the step
// after it (step 0 when the request holds no assistant message of the
// script, as in a fresh run or a continuation). That makes it behave like a
// real model re-asked the same question after a crash, which a cursor over
// a list would not, and it survives compaction as long as the window keeps
// its last assistant message. Steps are matched by their first tool-call ID,
// or by their text when they call no tool. Compaction requests are answered
// by Summarize.
//
// Scripted records every request it receives (Requests) so tests can check
// what a model would have seen, unless NoRecord is set.
type Scripted struct {
	// Steps are the step responses in order.
	Steps []Response
	// NoRecord keeps no requests (Requests returns none). A node serving a
	// script for as long as it runs, or a benchmark, would otherwise keep a
	// copy of every request it was ever sent: memory that only grows, and
	// a heap the collector scans again and again.
	NoRecord bool
	// Summarize answers compaction requests; nil fails them.
	Summarize func(req Request) (Response, error)
	// StepErrors optionally fails the n-th step request (by the same index)
	// with the given error, once.
	StepErrors map[int]error

	mu       sync.Mutex
	requests []Request
	failed   map[int]bool
}

// Generate implements Model.
func (s *Scripted) Generate(ctx context.Context, req Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !s.NoRecord {
		s.mu.Lock()
		s.requests = append(s.requests, cloneRequest(req))
		s.mu.Unlock()
	}
	if req.Purpose == PurposeCompaction {
		if s.Summarize == nil {
			return nil, fmt.Errorf("%w: compaction request but no Summarize", ErrUnexpectedRequest)
		}
		r, err := s.Summarize(req)
		if err != nil {
			return nil, err
		}
		return &r, nil
	}
	n := s.StepIndex(req.Messages)
	s.mu.Lock()
	if err, ok := s.StepErrors[n]; ok && !s.failed[n] {
		if s.failed == nil {
			s.failed = map[int]bool{}
		}
		s.failed[n] = true
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Unlock()
	if n >= len(s.Steps) {
		return nil, fmt.Errorf("%w: step %d, the script has %d", ErrUnexpectedRequest, n, len(s.Steps))
	}
	r := s.Steps[n]
	r.Message = cloneMessage(r.Message)
	if r.Message.Role == "" {
		r.Message.Role = RoleAssistant
	}
	return &r, nil
}

// Requests returns copies of the requests received so far.
func (s *Scripted) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	copy(out, s.requests)
	return out
}

// StepIndex returns the index of the step that answers a request with msgs.
func (s *Scripted) StepIndex(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != RoleAssistant {
			continue
		}
		for j, st := range s.Steps {
			if sameStep(st.Message, msgs[i]) {
				return j + 1
			}
		}
		return 0
	}
	return 0
}

func sameStep(script, got Message) bool {
	sc, gc := script.ToolCalls(), got.ToolCalls()
	if len(sc) > 0 || len(gc) > 0 {
		return len(sc) > 0 && len(gc) > 0 && sc[0].ID == gc[0].ID
	}
	return script.Text() == got.Text()
}

func cloneRequest(r Request) Request {
	msgs := make([]Message, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = cloneMessage(m)
	}
	r.Messages = msgs
	r.Tools = append([]ToolDef(nil), r.Tools...)
	return r
}

func cloneMessage(m Message) Message {
	parts := make([]Part, len(m.Parts))
	for i, p := range m.Parts {
		if p.ToolCall != nil {
			c := *p.ToolCall
			p.ToolCall = &c
		}
		if p.ToolResult != nil {
			c := *p.ToolResult
			c.Attachments = append([]Attachment(nil), c.Attachments...)
			p.ToolResult = &c
		}
		if p.Attachment != nil {
			c := *p.Attachment
			p.Attachment = &c
		}
		parts[i] = p
	}
	m.Parts = parts
	return m
}

// Call is a convenience for scripts: a step response made of tool calls.
func Call(id, name, args string) Part {
	return Part{Type: PartToolCall, ToolCall: &ToolCall{ID: id, Name: name, Args: args}}
}

// Reply is a convenience for scripts: an assistant response with parts.
func Reply(parts ...Part) Response {
	return Response{Message: Message{Role: RoleAssistant, Parts: parts}, Usage: Usage{InputTokens: 10, OutputTokens: 5}}
}
