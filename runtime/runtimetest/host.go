package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
	"github.com/cairn-agents/cairn/store/faults"
	"github.com/cairn-agents/cairn/store/storetest"
)

// Schemas of the reference definitions.
const (
	OutputSchema = `{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}},"additionalProperties":false}`
	ClaimSchema  = `{"type":"object","required":["claim"],"properties":{"claim":{"type":"string","minLength":1}},"additionalProperties":false}`
	TextSchema   = `{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`
	KVGetSchema  = `{"type":"object","required":["key"],"properties":{"key":{"type":"string"}},"additionalProperties":false}`
)

// Planner is the reference parent definition: two subagents, one capability.
func Planner() runtime.AgentDefinition {
	return runtime.AgentDefinition{
		Slug: "planner", Instructions: "Plan and answer.",
		OutputSchema: json.RawMessage(OutputSchema),
		Subagents:    []string{"fact-checker", "summarizer"},
		Capabilities: []string{"kv.get"},
	}
}

// Subagents are the planner's children.
func Subagents() []runtime.AgentDefinition {
	return []runtime.AgentDefinition{
		{Slug: "fact-checker", Instructions: "Check.", InputSchema: json.RawMessage(ClaimSchema), OutputSchema: json.RawMessage(OutputSchema)},
		{Slug: "summarizer", Instructions: "Summarize.", InputSchema: json.RawMessage(TextSchema), OutputSchema: json.RawMessage(OutputSchema)},
	}
}

// Capabilities is the reference catalog.
func Capabilities() []runtime.Capability {
	return []runtime.Capability{{Name: "kv.get", Description: "Read a key.", InputSchema: json.RawMessage(KVGetSchema), Effect: runtime.EffectReadOnly}}
}

// Host is one host of a run: a store opener with fault injection and fakes
// that keep their state across attempts, as a host's durable records would.
// Change its fields before the first attempt.
type Host struct {
	T       testing.TB
	Opener  storetest.Opener
	Faults  *faults.Injector
	Ctrl    *Controller
	Execs   *Executors
	Backend *Backend
	Sink    *Sink
	Model   *model.Scripted
	// WrapModel, when set, wraps Model in each attempt's input (a model
	// that reports failed requests to the trace, say).
	WrapModel func(model.Model) model.Model
	Clock     *Clock
	IDs       runtime.IDSource

	Def     runtime.AgentDefinition
	Subs    []runtime.AgentDefinition
	Caps    []runtime.Capability
	Message string
	Notice  string
	Redact  runtime.Redactor
	Session string
	Run     string
	Limits  runtime.ModelLimits
}

// NewHost returns a host of the planner on opener, scripted with steps.
func NewHost(t testing.TB, opener storetest.Opener, steps ...model.Response) *Host {
	return &Host{
		T: t, Opener: opener, Faults: &faults.Injector{}, Ctrl: &Controller{}, Execs: &Executors{},
		Backend: &Backend{}, Sink: &Sink{}, Model: &model.Scripted{Steps: steps},
		Clock: NewClock(), IDs: FixedID("run1"),
		Def: Planner(), Subs: Subagents(), Caps: Capabilities(), Message: "What is the answer?",
		Redact: runtime.Secrets{"s3cr3t"}, Session: "s1", Run: "r1",
		Limits: runtime.ModelLimits{ContextTokens: 100_000, OutputTokens: 4_000},
	}
}

// Store opens the run (a new lease) wrapped with the host's faults.
func (h *Host) Store() runtime.Store {
	h.T.Helper()
	s, err := h.Opener.Open(context.Background(), h.Session, h.Run)
	if err != nil {
		h.T.Fatalf("open store: %v", err)
	}
	return h.Faults.Wrap(s)
}

// Input is the run's input on s.
func (h *Host) Input(s runtime.Store) runtime.Input {
	var m model.Model = h.Model
	if h.WrapModel != nil {
		m = h.WrapModel(m)
	}
	return runtime.Input{
		Definition: h.Def, Subagents: h.Subs, Model: m, ModelLimits: h.Limits,
		Store: s, Backend: h.Backend, ExecutorFactory: h.Execs, Controller: h.Ctrl,
		Sink: h.Sink, Redactor: h.Redact, Message: h.Message, Capabilities: h.Caps,
		RecoveryNotice: h.Notice, Clock: h.Clock, IDs: h.IDs,
	}
}

// Attempt runs one attempt on a fresh lease.
func (h *Host) Attempt() (*runtime.Result, error) {
	return runtime.Run(context.Background(), h.Input(h.Store()))
}

// Complete runs one attempt that must complete and returns its reply.
func (h *Host) Complete() *runtime.Reply {
	h.T.Helper()
	res, err := h.Attempt()
	if err != nil || res == nil || res.Reply == nil {
		h.T.Fatalf("run did not complete: %+v, %v", res, err)
	}
	return res.Reply
}

// Drive runs attempts until the run completes, finishing children whenever
// it parks. An attempt failing with stopOn ends the drive with that error.
func (h *Host) Drive(max int, stopOn error) (*runtime.Result, error) {
	h.T.Helper()
	var lastErr error
	for i := 0; i < max; i++ {
		res, err := h.Attempt()
		if n := h.Execs.Open(); n != 0 {
			h.T.Fatalf("attempt %d left %d executors open (C41)", i, n)
		}
		switch {
		case err == nil:
			if res == nil || res.Reply == nil {
				h.T.Fatalf("attempt %d: nil error without a reply: %+v", i, res)
			}
			return res, nil
		case errors.Is(err, runtime.ErrWaiting):
			if res == nil || !res.Waiting {
				h.T.Fatalf("attempt %d: ErrWaiting without Result{Waiting: true}: %+v", i, res)
			}
			h.Ctrl.FinishChildren()
		case stopOn != nil && errors.Is(err, stopOn):
			return nil, err
		default:
			if res != nil {
				h.T.Fatalf("attempt %d: error %v came with a result %+v", i, err, res)
			}
		}
		lastErr = err
	}
	h.T.Fatalf("run did not finish in %d attempts; last error: %v", max, lastErr)
	return nil, nil
}

func (h *Host) unfaulted() runtime.Store {
	h.T.Helper()
	s, err := h.Opener.Open(context.Background(), h.Session, h.Run)
	if err != nil {
		h.T.Fatalf("open store: %v", err)
	}
	return s
}

// History is the session's full transcript.
func (h *Host) History() []model.Message {
	h.T.Helper()
	a, ok := h.unfaulted().(session.Auditor)
	if !ok {
		h.T.Fatal("the store keeps no history")
	}
	msgs, err := a.History(context.Background())
	if err != nil {
		h.T.Fatalf("history: %v", err)
	}
	return msgs
}

// Checkpoint is the run's durable checkpoint.
func (h *Host) Checkpoint() *runtime.Checkpoint {
	h.T.Helper()
	cp, err := h.unfaulted().LoadCheckpoint(context.Background())
	if err != nil {
		h.T.Fatalf("load checkpoint: %v", err)
	}
	return cp
}

// Compactions lists the session's compactions as reason@through, when the
// store can tell (nil otherwise).
func (h *Host) Compactions() []string {
	h.T.Helper()
	c, ok := h.unfaulted().(interface{ Compactions() []session.Compaction })
	if !ok {
		return nil
	}
	var out []string
	for _, x := range c.Compactions() {
		out = append(out, x.Reason+"@"+x.Through)
	}
	return out
}

// Call is a tool call part of a scripted response.
func Call(id, name, args string) model.Part { return model.Call(id, name, args) }

// Calls is a scripted response made of parts.
func Calls(parts ...model.Part) model.Response { return model.Reply(parts...) }

// CompleteOutput is a complete call with an output answer.
func CompleteOutput(id, answer string) model.Part {
	return Call(id, "complete", `{"type":"output","output":{"answer":"`+answer+`"}}`)
}

// ToolResult finds the tool result for a call ID in a transcript.
func ToolResult(msgs []model.Message, callID string) *model.ToolResult {
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.ToolResult != nil && p.ToolResult.CallID == callID {
				return p.ToolResult
			}
		}
	}
	return nil
}

// Dump renders a transcript compactly for failure messages.
func Dump(msgs []model.Message) string {
	out := ""
	for _, m := range msgs {
		out += fmt.Sprintf("\n  %s %s", m.ID, m.Role)
		for _, p := range m.Parts {
			switch {
			case p.ToolCall != nil:
				out += fmt.Sprintf(" call(%s %s)", p.ToolCall.ID, p.ToolCall.Name)
			case p.ToolResult != nil:
				c := p.ToolResult.Content
				if len(c) > 40 {
					c = c[:40]
				}
				out += fmt.Sprintf(" result(%s %q)", p.ToolResult.CallID, c)
			default:
				out += " " + string(p.Type)
			}
		}
	}
	return out
}
