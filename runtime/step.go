package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
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
	req := r.stepRequest(window)
	if session.Overflows(req, r.limits()) {
		if window, err = r.compact(ctx, window); err != nil {
			return err
		}
		req = r.stepRequest(window)
	}
	// The model checkpoint (this phase) is durable before the reservation
	// (C35); a crash from here on costs a step and recovery reserves again.
	if err := r.in.Controller.BeforeModel(ctx); err != nil {
		return fmt.Errorf("runtime: before model: %w", err)
	}
	failures := &modelFailures{}
	resp, err := r.in.Model.Generate(r.traced(ctx, failures), req)
	if err != nil {
		return r.redacted(fmt.Errorf("runtime: model%s: %w", failures.summary(), err))
	}
	r.notice = ""
	if resp == nil {
		return fmt.Errorf("%w: model returned no response and no error", ErrModelResponse)
	}
	msg := resp.Message
	msg.Role = model.RoleAssistant
	msg.ID = "" // the runtime owns message IDs; provider IDs belong in Meta
	calls := msg.ToolCalls()
	if err := r.checkCallIDs(calls, window); err != nil {
		return err
	}
	next := r.cp.clone()
	next.Step++
	next.ResponseID = messageID(next.RunKey, r.cp.Revision+1, 0)
	next.Append = []model.Message{msg}
	if resp.Usage != (model.Usage{}) {
		u := resp.Usage
		next.Usage = &u
	}
	next.ModelFailures = failures.all()
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
		r.emit(ctx, SinkEvent{Kind: SinkToolCall, Revision: r.cp.Revision, MessageID: r.cp.ResponseID, CallID: c.ID, Tool: c.Name, Text: c.Args, Offered: r.offers(c.Name)})
	}
	return nil
}

// traced returns ctx with a model.Trace that shows each failed provider
// request on the sink as it happens (redacted: a provider's error may
// quote the request) and keeps it in into, for the response commit.
func (r *runner) traced(ctx context.Context, into *modelFailures) context.Context {
	return model.WithTrace(ctx, &model.Trace{AttemptFailed: func(f model.Failure) {
		f.Error = r.in.Redactor.Redact(f.Error)
		into.add(f)
		r.emit(ctx, SinkEvent{Kind: SinkModelFailure, Revision: r.cp.Revision, Text: FailureLine(f), IsError: true, Failure: &f})
	}})
}

// redacted is err with the secrets removed from its text, its chain kept
// (errors.Is and As see through it): a provider's error may quote the
// request, and the text of a step's error becomes the run's recorded end.
func (r *runner) redacted(err error) error {
	return &redactedError{msg: r.in.Redactor.Redact(err.Error()), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// modelFailures are one model request's failed attempts. A model wrapper
// may call the trace from a goroutine of its own: they are locked.
type modelFailures struct {
	mu   sync.Mutex
	list []model.Failure
}

func (m *modelFailures) add(f model.Failure) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.list = append(m.list, f)
}

func (m *modelFailures) all() []model.Failure {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]model.Failure(nil), m.list...)
}

// summary lists the failed attempts before the last, for the error of a
// step that failed: it is what the run's end records, so the attempts
// the retries made stay readable in the log (the last one is the error
// itself).
func (m *modelFailures) summary() string {
	all := m.all()
	if len(all) == 0 {
		return ""
	}
	// A step given up on fails with its last failure's error: the others
	// are listed. One abandoned while it backed off (the run stopped)
	// fails with the context's error: all are.
	before := all
	if !all[len(all)-1].Retry {
		before = all[:len(all)-1]
	}
	if len(before) == 0 {
		return ""
	}
	parts := make([]string, 0, len(before))
	for _, f := range before {
		parts = append(parts, failureCause(f))
	}
	if len(before) == len(all) {
		return fmt.Sprintf(" (%d failed requests: %s)", len(all), strings.Join(parts, ", "))
	}
	return fmt.Sprintf(" (%d requests; before the last: %s)", len(all), strings.Join(parts, ", "))
}

// FailureLine says a failed provider request in one line, as `node run`
// and `runs tail` print it.
func FailureLine(f model.Failure) string {
	who := f.Provider
	if f.Model != "" {
		who += " " + f.Model
	}
	then := "not retried"
	if f.Retry {
		then = "retrying in " + f.RetryIn.Round(time.Millisecond).String()
	}
	msg := f.Error
	if r := []rune(msg); len(r) > maxFailureLine {
		msg = string(r[:maxFailureLine]) + "..."
	}
	return fmt.Sprintf("%s request %d failed (%s): %s; %s", who, f.Attempt, failureCause(f), msg, then)
}

// maxFailureLine clips a failure's error in its line; the Failure keeps
// it whole.
const maxFailureLine = 200

// failureCause is a failure's status or class: "HTTP 503", "timeout".
func failureCause(f model.Failure) string {
	if f.Status != 0 && f.Class == model.FailureStatus {
		return fmt.Sprintf("HTTP %d", f.Status)
	}
	return f.Class
}

// stepRequest builds a step request from the window, redacted (C36), with
// the recovery notice if this attempt has not sent it yet (C5).
func (r *runner) stepRequest(window []model.Message) model.Request {
	req := model.Request{
		Purpose:         model.PurposeStep,
		System:          r.in.Redactor.Redact(r.in.Definition.Instructions + systemNote),
		Messages:        r.redactAll(window),
		Tools:           r.c.tools,
		MaxOutputTokens: r.in.ModelLimits.OutputTokens,
		Options:         r.in.Definition.ModelOptions,
	}
	if r.notice != "" {
		// Host context, not transcript: it is sent, never committed.
		req.Messages = append(req.Messages, model.TextMessage("recovery-notice", model.RoleUser, "[host recovery notice] "+r.in.Redactor.Redact(r.notice)))
	}
	return req
}

func (r *runner) limits() session.Limits {
	return session.Limits{ContextTokens: r.in.ModelLimits.ContextTokens, OutputTokens: r.in.ModelLimits.OutputTokens, MarginTokens: r.in.ModelLimits.MarginTokens}
}

// compact makes the window fit at a model boundary (C15, C36): prune old
// tool results if that is enough, otherwise summarize the head with a
// budgeted model request (C24) and keep the tail. The new window is
// committed with Store.Compact, which is not a checkpoint revision; a crash
// before it leaves the old window, after it the next attempt finds the
// window already small and does not compact again.
func (r *runner) compact(ctx context.Context, window []model.Message) ([]model.Message, error) {
	l := r.limits()
	room := l.Prompt() - session.EstimateRequest(model.Request{System: r.in.Definition.Instructions + systemNote, Tools: r.c.tools})
	if room <= 0 || len(window) == 0 {
		return nil, fmt.Errorf("runtime: context overflow: instructions and tool definitions alone exceed the %d-token prompt", l.Prompt())
	}
	through := window[len(window)-1].ID
	pruned, changed := session.PruneRedacted(window, room/2, r.in.Redactor.Redact)
	if changed && session.EstimateMessages(pruned) <= room {
		if err := r.in.Store.Compact(ctx, session.Compaction{Through: through, Window: pruned, Reason: "prune"}); err != nil {
			return nil, fmt.Errorf("runtime: compact (prune): %w", err)
		}
		return pruned, nil
	}
	head, tail := session.Split(pruned, room/3)
	if len(head) == 0 {
		return nil, fmt.Errorf("runtime: context overflow: the latest step alone needs %d tokens of a %d-token prompt", session.EstimateMessages(tail), room)
	}
	if err := r.in.Controller.BeforeModel(ctx); err != nil {
		return nil, fmt.Errorf("runtime: before model (compaction): %w", err)
	}
	out := min(l.OutputTokens, room/3)
	sreq := session.SummaryRequest(r.redactAll(head), l, out)
	failures := &modelFailures{}
	resp, err := r.in.Model.Generate(r.traced(ctx, failures), sreq)
	if err != nil {
		return nil, r.redacted(fmt.Errorf("runtime: model (compaction)%s: %w", failures.summary(), err))
	}
	summary := ""
	if resp != nil {
		summary = strings.TrimSpace(resp.Message.Text())
	}
	if summary == "" {
		return nil, fmt.Errorf("%w: the compaction summary is empty", ErrModelResponse)
	}
	cont := session.Continuation(fmt.Sprintf("%s-%d-summary", r.cp.RunKey, r.cp.Revision), session.Task(head), summary)
	next := append([]model.Message{cont}, tail...)
	if n := session.EstimateMessages(next); n > room {
		return nil, fmt.Errorf("runtime: context overflow: the compacted window still needs %d tokens of a %d-token prompt", n, room)
	}
	if err := r.in.Store.Compact(ctx, session.Compaction{Through: through, Window: next, Reason: "summary"}); err != nil {
		return nil, fmt.Errorf("runtime: compact (summary): %w", err)
	}
	return next, nil
}

// checkCallIDs rejects responses the journal cannot hold: a call without an
// ID, an ID twice in one response, or an ID used earlier in the run or in
// the conversation's window (a provider rejects a conversation with two
// calls of one ID, and a continuation shares its session's window).
func (r *runner) checkCallIDs(calls []model.ToolCall, window []model.Message) error {
	used := make(map[string]bool, len(r.cp.UsedCallIDs)+len(calls))
	for _, id := range r.cp.UsedCallIDs {
		used[id] = true
	}
	for _, m := range window {
		for _, c := range m.ToolCalls() {
			used[c.ID] = true
		}
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

// redactAll copies msgs with every text the model could read redacted
// (C36). Opaque provider data cannot be rewritten without breaking it (a
// thinking block's signature covers its text): a reasoning part or a
// metadata value that holds a secret is dropped from the request instead.
func (r *runner) redactAll(msgs []model.Message) []model.Message {
	red := r.in.Redactor.Redact
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
		parts := make([]model.Part, 0, len(m.Parts))
		for _, p := range m.Parts {
			if p.Type == model.PartReasoning && red(p.Text) != p.Text {
				continue
			}
			p.Text = red(p.Text)
			p.Meta = redactMeta(red, p.Meta)
			if p.ToolCall != nil {
				tc := *p.ToolCall
				tc.Name, tc.Args = red(tc.Name), red(tc.Args) // the name is the model's choice too
				p.ToolCall = &tc
			}
			if p.ToolResult != nil {
				tr := *p.ToolResult
				tr.Name, tr.Content = red(tr.Name), red(tr.Content)
				p.ToolResult = &tr
			}
			parts = append(parts, p)
		}
		m.Parts = parts
		m.Meta = redactMeta(red, m.Meta)
		out[i] = m
	}
	return out
}

// redactMeta drops the metadata values that hold a secret.
func redactMeta(red func(string) string, meta map[string][]byte) map[string][]byte {
	var out map[string][]byte
	for k, v := range meta {
		if red(string(v)) != string(v) {
			if out == nil {
				out = make(map[string][]byte, len(meta))
				for k2, v2 := range meta {
					out[k2] = v2
				}
			}
			delete(out, k)
		}
	}
	if out == nil {
		return meta
	}
	return out
}
