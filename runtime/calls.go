package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// outcome is a call's postresult, before it is committed.
type outcome struct {
	state       CallState
	content     string
	attachments []model.Attachment
	reply       *Reply // set when complete was accepted
}

func toolError(format string, args ...any) outcome {
	return outcome{state: CallError, content: fmt.Sprintf(format, args...)}
}

// idempotent reports whether a call interrupted after its predispatch may be
// dispatched again: the controller deduplicates these by tool-call ID.
func (r *runner) idempotent(name string) bool {
	switch name {
	case ToolContinue, ToolWait, ToolComplete:
		return true
	}
	_, spawn := r.c.spawn[name]
	return spawn
}

// unknownEffect is the notice for an interrupted call that is not retried
// (C20). For a script it names what the script could have reached, by
// effect class, so the model knows what is safe to repeat.
func (r *runner) unknownEffect(name string) outcome {
	text := fmt.Sprintf("Unknown effect: this %s call was interrupted by a restart after its dispatch was recorded. "+
		"It may or may not have run, wholly or in part, and it will not be retried. "+
		"Check the state it would have changed before repeating any of it.", name)
	if name == jstool.Name && len(r.c.caps) > 0 {
		byEffect := map[string][]string{}
		for _, c := range r.c.caps {
			byEffect[c.Info.Effect] = append(byEffect[c.Info.Effect], "caps."+c.Info.Name)
		}
		for _, e := range []struct{ class, note string }{
			{EffectEffectful, "may have changed state; check before calling again"},
			{EffectIdempotent, "safe to call again with the same arguments"},
			{EffectReadOnly, "changed nothing; safe to call again"},
		} {
			if names := byEffect[e.class]; len(names) > 0 {
				text += fmt.Sprintf("\n%s (%s): %s", e.class, e.note, strings.Join(names, ", "))
			}
		}
	}
	return outcome{state: CallUnknown, content: text}
}

const skippedText = "Skipped: the run completed before this call was executed."

// callStep runs the first unfinished call of the journal and commits its
// postresult (C19). It returns a Result when the run completed or parked.
func (r *runner) callStep(ctx context.Context) (*Result, error) {
	i := -1
	for j, c := range r.cp.Calls {
		if !c.State.Terminal() {
			i = j
			break
		}
	}
	if i < 0 {
		return nil, fmt.Errorf("runtime: checkpoint revision %d: calls phase with no unfinished call", r.cp.Revision)
	}
	if r.cp.Calls[i].State == CallPending {
		next := r.cp.clone()
		next.Calls[i].State = CallDispatching
		if err := r.commit(ctx, next); err != nil {
			return nil, err
		}
		r.fresh[next.Calls[i].ID] = true
	}
	rec := r.cp.Calls[i]
	out, err := r.execute(ctx, rec, !r.fresh[rec.ID])
	if errors.Is(err, ErrWaiting) {
		r.emit(ctx, SinkEvent{Kind: SinkWaiting, Revision: r.cp.Revision, CallID: rec.ID, Tool: rec.Name})
		return &Result{Waiting: true, WaitCallID: rec.ID}, err
	}
	if err != nil {
		return nil, err
	}
	return r.finishCall(ctx, i, out)
}

// finishCall commits call i's postresult, merged with the next call's
// predispatch, or with the skipped outcomes and the reply of a completion
// (C17, C31).
func (r *runner) finishCall(ctx context.Context, i int, out outcome) (*Result, error) {
	next := r.cp.clone()
	rev := r.cp.Revision + 1
	// result appends a call's tool result message; the journal keeps only
	// its ID, so a commit carries each result once (in Append), and the
	// checkpoint stays small however many calls the response has.
	result := func(j int, state CallState, content string, att []model.Attachment) {
		c := &next.Calls[j]
		m := model.Message{ID: messageID(next.RunKey, rev, len(next.Append)), Role: model.RoleTool, Parts: []model.Part{{
			Type:       model.PartToolResult,
			ToolResult: &model.ToolResult{CallID: c.ID, Name: c.Name, Content: content, IsError: state != CallDone, Attachments: att},
		}}}
		next.Append = append(next.Append, m)
		c.State, c.ResultID = state, m.ID
	}
	result(i, out.state, out.content, out.attachments)
	switch {
	case out.reply != nil:
		for j := i + 1; j < len(next.Calls); j++ {
			result(j, CallSkipped, skippedText, nil)
		}
		next.Reply = out.reply
		next.Phase = PhaseCompleted
	case i+1 < len(next.Calls):
		next.Calls[i+1].State = CallDispatching
	default:
		next.Phase = PhaseModel
	}
	appended := next.Append // commit keeps the payload; the checkpoint held after it does not need it
	if err := r.commit(ctx, next); err != nil {
		return nil, err
	}
	if i+1 < len(next.Calls) && next.Calls[i+1].State == CallDispatching {
		r.fresh[next.Calls[i+1].ID] = true
	}
	for k, m := range appended {
		c := next.Calls[i+k]
		r.emit(ctx, SinkEvent{Kind: SinkToolResult, Revision: next.Revision, MessageID: m.ID, CallID: c.ID, Tool: c.Name,
			Text: m.Parts[0].ToolResult.Content, IsError: c.State != CallDone})
	}
	if next.Reply != nil {
		r.emit(ctx, SinkEvent{Kind: SinkCompleted, Revision: next.Revision, Text: replyText(next.Reply)})
		return &Result{Reply: next.Reply}, nil
	}
	return nil, nil
}

func replyText(rp *Reply) string {
	if rp.Type == ReplyNeedsInput {
		return rp.Question
	}
	return string(rp.Output)
}

// stop reports whether a controller or executor error must end the attempt
// instead of becoming a tool error (C23).
func stop(ctx context.Context, err error) bool {
	return isFatal(err) || ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// control turns a controller result into an outcome.
func control(ctx context.Context, tool string, v any, err error) (outcome, error) {
	if err != nil {
		if stop(ctx, err) {
			return outcome{}, fmt.Errorf("runtime: %s: %w", tool, err)
		}
		return toolError("%s failed: %s", tool, err), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return outcome{}, fmt.Errorf("runtime: %s: encode result: %w", tool, err)
	}
	return outcome{state: CallDone, content: string(b)}, nil
}

// execute dispatches one journaled call. resumed says the call was found
// dispatching from an earlier attempt. Argument checks come first: they
// have no effect, so a call whose arguments are invalid is answered the same
// way whether or not it was interrupted.
func (r *runner) execute(ctx context.Context, rec CallRecord, resumed bool) (outcome, error) {
	args := rec.Args
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	invalid := func(err error) outcome {
		return toolError("%s: invalid arguments:\n%s", rec.Name, err)
	}
	if child, ok := r.c.spawn[rec.Name]; ok {
		if err := r.c.childInput[child.Slug].Validate([]byte(args)); err != nil {
			return invalid(err), nil
		}
		info, err := r.in.Controller.Spawn(ctx, rec.ID, child.Slug, []byte(args))
		return control(ctx, rec.Name, info, err)
	}
	var decoded any
	if s, ok := r.c.args[rec.Name]; ok {
		v, err := s.ValidateValue([]byte(args))
		if err != nil {
			return invalid(err), nil
		}
		decoded = v
	} else if rec.Name != ToolComplete {
		return toolError("unknown tool %q; the tools are: %s", rec.Name, r.toolNames()), nil
	}
	switch {
	case rec.Name == jstool.Name:
		// run_js's schema holds exactly a string "code": the checked value
		// gives it without a second decoding of the arguments.
		obj, _ := decoded.(map[string]any)
		code, ok := obj["code"].(string)
		if !ok {
			var a jstool.Args
			if err := json.Unmarshal([]byte(args), &a); err != nil {
				return invalid(err), nil
			}
			code = a.Code
		}
		if resumed {
			return r.unknownEffect(rec.Name), nil
		}
		return r.runJS(ctx, rec.ID, code)
	case rec.Name == ToolComplete:
		if err := r.c.completion.Validate([]byte(args)); err != nil {
			return invalid(err), nil
		}
		var reply Reply
		if err := json.Unmarshal([]byte(args), &reply); err != nil {
			return invalid(err), nil
		}
		if err := r.in.Controller.Complete(ctx, reply); err != nil {
			if stop(ctx, err) {
				return outcome{}, fmt.Errorf("runtime: complete: %w", err)
			}
			// C30: the model sees the rejection and may resolve it.
			return toolError("complete was rejected: %s", err), nil
		}
		return outcome{state: CallDone, content: "Completed.", reply: &reply}, nil
	case rec.Name == ToolContinue:
		var a struct {
			SessionID string `json:"session_id"`
			Prompt    string `json:"prompt"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return invalid(err), nil
		}
		info, err := r.in.Controller.Continue(ctx, rec.ID, a.SessionID, a.Prompt)
		return control(ctx, rec.Name, info, err)
	case rec.Name == ToolGet, rec.Name == ToolCancel:
		var a struct {
			IDs []string `json:"ids"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return invalid(err), nil
		}
		if resumed {
			return r.unknownEffect(rec.Name), nil
		}
		if rec.Name == ToolGet {
			infos, err := r.in.Controller.Get(ctx, a.IDs)
			return control(ctx, rec.Name, infos, err)
		}
		infos, err := r.in.Controller.Cancel(ctx, a.IDs)
		return control(ctx, rec.Name, infos, err)
	case rec.Name == ToolWait:
		var a struct {
			IDs     []string `json:"ids"`
			Mode    WaitMode `json:"mode"`
			Timeout int64    `json:"timeout_seconds"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return invalid(err), nil
		}
		if a.Mode == "" {
			a.Mode = WaitAll
		}
		res, err := r.in.Controller.Wait(ctx, rec.ID, WaitRequest{CallIDs: a.IDs, Mode: a.Mode, Timeout: time.Duration(a.Timeout) * time.Second})
		if errors.Is(err, ErrWaiting) {
			return outcome{}, err
		}
		return control(ctx, rec.Name, res, err)
	}
	return outcome{}, fmt.Errorf("runtime: tool %q has an argument schema but no dispatch", rec.Name)
}

func (r *runner) toolNames() string {
	names := make([]string, len(r.c.tools))
	for i, t := range r.c.tools {
		names[i] = t.Name
	}
	return strings.Join(names, ", ")
}

// offers reports whether name is one of the tools the run was offered.
func (r *runner) offers(name string) bool {
	for _, t := range r.c.tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// runJS runs a script on the attempt's executor, allocating it on first use
// (C41).
func (r *runner) runJS(ctx context.Context, callID, code string) (outcome, error) {
	if r.exec == nil {
		r.invoker = jstool.NewInvoker(r.c.caps, r.in.Backend, r.in.Redactor, r.now)
		infos := make([]jstool.CapabilityInfo, len(r.c.caps))
		for i, c := range r.c.caps {
			infos[i] = c.Info
		}
		exec, err := r.in.ExecutorFactory.NewExecutor(ctx, jstool.Config{Capabilities: infos, Invoke: r.invoker.Invoke})
		if err != nil {
			if stop(ctx, err) {
				return outcome{}, fmt.Errorf("runtime: allocate executor: %w", err)
			}
			return toolError("run_js: the executor could not start (the script did not run): %s", err), nil
		}
		if nilish(exec) {
			return outcome{}, fmt.Errorf("runtime: allocate executor: factory returned no executor")
		}
		r.exec = exec
	}
	o, err := r.exec.Execute(ctx, jstool.Script{CallID: callID, Code: code})
	callbacks := r.invoker.Take(callID)
	if err != nil {
		if stop(ctx, err) {
			return outcome{}, fmt.Errorf("runtime: run_js: %w", err)
		}
		// The realm is broken; the next script gets a new one.
		r.discardExecutor()
		return outcome{state: CallError, content: jstool.FailureText("executor", err.Error(), callbacks, nil)}, nil
	}
	f := jstool.Format(o, callbacks)
	st := CallDone
	if f.IsError {
		st = CallError
	}
	return outcome{state: st, content: f.Content, attachments: o.Attachments}, nil
}

// SinkEventsOf is what the loop told its sink of the commit cp, read back
// from the commit alone: the failed provider requests its response cost
// (already redacted), its text and calls, its tool results and its reply,
// unredacted (a compaction's failed requests are shown live only: a
// compaction is no revision). Only SinkWaiting is not there (a park is no
// commit). A reader of the log (the API's event stream, `runs tail`) shows
// a run as its sink did with it.
func SinkEventsOf(cp *Checkpoint) []SinkEvent {
	var out []SinkEvent
	// The failed requests the response cost were shown while the step
	// waited, at the revision before it.
	for _, f := range cp.ModelFailures {
		out = append(out, SinkEvent{Kind: SinkModelFailure, Revision: cp.Revision - 1, Text: FailureLine(f), IsError: true, Failure: &f})
	}
	for _, m := range cp.Append {
		switch m.Role {
		case model.RoleAssistant:
			if text := m.Text(); text != "" {
				out = append(out, SinkEvent{Kind: SinkText, Revision: cp.Revision, MessageID: cp.ResponseID, Text: text})
			}
			for _, c := range m.ToolCalls() {
				out = append(out, SinkEvent{Kind: SinkToolCall, Revision: cp.Revision, MessageID: cp.ResponseID, CallID: c.ID, Tool: c.Name, Text: c.Args})
			}
		case model.RoleTool:
			for _, p := range m.Parts {
				tr := p.ToolResult
				if tr == nil {
					continue
				}
				ev := SinkEvent{Kind: SinkToolResult, Revision: cp.Revision, MessageID: m.ID, CallID: tr.CallID, Tool: tr.Name, Text: tr.Content}
				for _, c := range cp.Calls {
					if c.ID == tr.CallID {
						ev.Tool, ev.IsError = c.Name, c.State != CallDone
					}
				}
				out = append(out, ev)
			}
		}
	}
	if cp.Reply != nil {
		out = append(out, SinkEvent{Kind: SinkCompleted, Revision: cp.Revision, Text: replyText(cp.Reply)})
	}
	return out
}
