package runtime

import (
	"context"
	"fmt"

	"github.com/cairn-agents/cairn/runtime/model"
)

// systemNote follows the definition's instructions in every request.
const systemNote = "\n\nYou act only through tool calls. Finish by calling `complete`."

// noCallNudge answers a response that called no tool, so the next request
// tells the model what the loop expects.
const noCallNudge = "[runtime] Your last response called no tool. Act with tool calls and finish by calling `complete`."

// modelStep is one model boundary: reserve budget, ask the model with the
// redacted window, commit the response with its calls journaled (C32).
func (r *runner) modelStep(ctx context.Context) error {
	window, err := r.in.Store.Load(ctx)
	if err != nil {
		return fmt.Errorf("runtime: load window: %w", err)
	}
	// The model checkpoint (this phase) is durable before the reservation
	// (C35); a crash from here on costs a step and recovery reserves again.
	if err := r.in.Controller.BeforeModel(ctx); err != nil {
		return fmt.Errorf("runtime: before model: %w", err)
	}
	req := model.Request{
		Purpose:         model.PurposeStep,
		System:          r.in.Redactor.Redact(r.in.Definition.Instructions + systemNote),
		Messages:        r.redactAll(window),
		Tools:           r.c.tools,
		MaxOutputTokens: r.in.ModelLimits.OutputTokens,
		Options:         r.in.Definition.ModelOptions,
	}
	if r.notice != "" {
		// Host context, not transcript: it is sent, never committed (C5).
		req.Messages = append(req.Messages, model.TextMessage("recovery-notice", model.RoleUser, "[host recovery notice] "+r.in.Redactor.Redact(r.notice)))
	}
	resp, err := r.in.Model.Generate(ctx, req)
	if err != nil {
		return fmt.Errorf("runtime: model: %w", err)
	}
	r.notice = ""
	if resp == nil {
		return fmt.Errorf("%w: model returned no response and no error", ErrModelResponse)
	}
	msg := resp.Message
	msg.Role = model.RoleAssistant
	msg.ID = "" // the runtime owns message IDs; provider IDs belong in Meta
	calls := msg.ToolCalls()
	if err := r.checkCallIDs(calls); err != nil {
		return err
	}
	next := r.cp.clone()
	next.Step++
	next.ResponseID = messageID(next.RunKey, r.cp.Revision+1, 0)
	next.Append = []model.Message{msg}
	next.Calls = nil
	if len(calls) == 0 {
		next.Phase = PhaseModel
		next.Append = append(next.Append, model.Message{Role: model.RoleUser, Parts: []model.Part{{Type: model.PartText, Text: noCallNudge}}})
	} else {
		next.Phase = PhaseCalls
		for _, c := range calls {
			next.Calls = append(next.Calls, CallRecord{ID: c.ID, Name: c.Name, Args: c.Args, State: CallPending})
			next.UsedCallIDs = append(next.UsedCallIDs, c.ID)
		}
		// The response commit is also the first call's predispatch.
		next.Calls[0].State = CallDispatching
	}
	if err := r.commit(ctx, next); err != nil {
		return err
	}
	if len(calls) > 0 {
		r.fresh[calls[0].ID] = true
	}
	if text := msg.Text(); text != "" {
		r.emit(ctx, SinkEvent{Kind: SinkText, Revision: r.cp.Revision, MessageID: r.cp.ResponseID, Text: text})
	}
	for _, c := range calls {
		r.emit(ctx, SinkEvent{Kind: SinkToolCall, Revision: r.cp.Revision, MessageID: r.cp.ResponseID, CallID: c.ID, Tool: c.Name, Text: c.Args})
	}
	return nil
}

// checkCallIDs rejects responses the journal cannot hold: a call without an
// ID, an ID twice in one response, or an ID used earlier in the run.
func (r *runner) checkCallIDs(calls []model.ToolCall) error {
	used := make(map[string]bool, len(r.cp.UsedCallIDs)+len(calls))
	for _, id := range r.cp.UsedCallIDs {
		used[id] = true
	}
	seen := map[string]bool{}
	for i, c := range calls {
		switch {
		case c.ID == "":
			return fmt.Errorf("%w: tool call %d (%s) has no ID", ErrModelResponse, i, c.Name)
		case seen[c.ID]:
			return fmt.Errorf("%w: tool call ID %q appears twice in one response", ErrModelResponse, c.ID)
		case used[c.ID]:
			return fmt.Errorf("%w: tool call ID %q was already used in this run", ErrModelResponse, c.ID)
		}
		seen[c.ID] = true
	}
	return nil
}

// redactAll copies msgs with every text the model could read redacted (C36).
func (r *runner) redactAll(msgs []model.Message) []model.Message {
	red := r.in.Redactor.Redact
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
		parts := make([]model.Part, len(m.Parts))
		for j, p := range m.Parts {
			p.Text = red(p.Text)
			if p.ToolCall != nil {
				tc := *p.ToolCall
				tc.Args = red(tc.Args)
				p.ToolCall = &tc
			}
			if p.ToolResult != nil {
				tr := *p.ToolResult
				tr.Content = red(tr.Content)
				p.ToolResult = &tr
			}
			parts[j] = p
		}
		m.Parts = parts
		out[i] = m
	}
	return out
}
