package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/runtime/session"
	"github.com/cairn-agents/cairn/store/memory"
)

const (
	outputSchema = `{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"}},"additionalProperties":false}`
	claimSchema  = `{"type":"object","required":["claim"],"properties":{"claim":{"type":"string","minLength":1}},"additionalProperties":false}`
	textSchema   = `{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`
	kvGetSchema  = `{"type":"object","required":["key"],"properties":{"key":{"type":"string"}},"additionalProperties":false}`
)

func planner() runtime.AgentDefinition {
	return runtime.AgentDefinition{
		Slug: "planner", Instructions: "Plan and answer.",
		OutputSchema: json.RawMessage(outputSchema),
		Subagents:    []string{"fact-checker", "summarizer"},
		Capabilities: []string{"kv.get"},
	}
}

func subagents() []runtime.AgentDefinition {
	return []runtime.AgentDefinition{
		{Slug: "fact-checker", Instructions: "Check.", InputSchema: json.RawMessage(claimSchema), OutputSchema: json.RawMessage(outputSchema)},
		{Slug: "summarizer", Instructions: "Summarize.", InputSchema: json.RawMessage(textSchema), OutputSchema: json.RawMessage(outputSchema)},
	}
}

func capabilities() []runtime.Capability {
	return []runtime.Capability{{Name: "kv.get", Description: "Read a key.", InputSchema: json.RawMessage(kvGetSchema)}}
}

// env is one host: a memory DB and fakes that keep their state across
// attempts, as a host's durable records would.
type env struct {
	t       testing.TB
	db      *memory.DB
	ctrl    *runtimetest.Controller
	execs   *runtimetest.Executors
	backend *runtimetest.Backend
	sink    *runtimetest.Sink
	model   *model.Scripted
	clock   *runtimetest.Clock
	ids     runtime.IDSource
	// def and subs may be changed before the first attempt.
	def     runtime.AgentDefinition
	subs    []runtime.AgentDefinition
	caps    []runtime.Capability
	message string
	notice  string
	redact  runtime.Redactor
	session string
	run     string
	limits  runtime.ModelLimits
}

func newEnv(t testing.TB, steps ...model.Response) *env {
	return &env{
		t: t, db: memory.New(), ctrl: &runtimetest.Controller{}, execs: &runtimetest.Executors{},
		backend: &runtimetest.Backend{}, sink: &runtimetest.Sink{}, model: &model.Scripted{Steps: steps},
		clock: runtimetest.NewClock(), ids: runtimetest.FixedID("run1"),
		def: planner(), subs: subagents(), caps: capabilities(), message: "What is the answer?",
		redact: runtime.Secrets{"s3cr3t"}, session: "s1", run: "r1",
		limits: runtime.ModelLimits{ContextTokens: 100_000, OutputTokens: 4_000},
	}
}

func (e *env) store() runtime.Store {
	e.t.Helper()
	s, err := e.db.Open(context.Background(), e.session, e.run)
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	return s
}

func (e *env) input(s runtime.Store) runtime.Input {
	return runtime.Input{
		Definition: e.def, Subagents: e.subs, Model: e.model,
		ModelLimits: e.limits,
		Store:       s, Backend: e.backend, ExecutorFactory: e.execs, Controller: e.ctrl,
		Sink: e.sink, Redactor: e.redact, Message: e.message, Capabilities: e.caps,
		RecoveryNotice: e.notice, Clock: e.clock, IDs: e.ids,
	}
}

// attempt runs one attempt on a fresh lease.
func (e *env) attempt() (*runtime.Result, error) {
	return runtime.Run(context.Background(), e.input(e.store()))
}

// drive runs attempts until the run completes, finishing children whenever
// it parks. It returns the final result, or the last error once an attempt
// fails with stopOn.
func (e *env) drive(max int, stopOn error) (*runtime.Result, error) {
	e.t.Helper()
	var lastErr error
	for i := 0; i < max; i++ {
		res, err := e.attempt()
		if n := e.execs.Open(); n != 0 {
			e.t.Fatalf("attempt %d left %d executors open (C41)", i, n)
		}
		switch {
		case err == nil:
			if res == nil || res.Reply == nil {
				e.t.Fatalf("attempt %d: nil error without a reply: %+v", i, res)
			}
			return res, nil
		case errors.Is(err, runtime.ErrWaiting):
			if res == nil || !res.Waiting {
				e.t.Fatalf("attempt %d: ErrWaiting without Result{Waiting: true}: %+v", i, res)
			}
			e.ctrl.FinishChildren()
		case stopOn != nil && errors.Is(err, stopOn):
			return nil, err
		default:
			if res != nil {
				e.t.Fatalf("attempt %d: error %v came with a result %+v", i, err, res)
			}
		}
		lastErr = err
	}
	e.t.Fatalf("run did not finish in %d attempts; last error: %v", max, lastErr)
	return nil, nil
}

func (e *env) history() []model.Message {
	e.t.Helper()
	s := e.store()
	h, err := s.(session.Auditor).History(context.Background())
	if err != nil {
		e.t.Fatalf("history: %v", err)
	}
	return h
}

func (e *env) checkpoint() *runtime.Checkpoint {
	e.t.Helper()
	cp, err := e.store().LoadCheckpoint(context.Background())
	if err != nil {
		e.t.Fatalf("load checkpoint: %v", err)
	}
	return cp
}

func calls(parts ...model.Part) model.Response { return model.Reply(parts...) }

func call(id, name, args string) model.Part { return model.Call(id, name, args) }

func completeOutput(id, answer string) model.Part {
	return call(id, "complete", `{"type":"output","output":{"answer":"`+answer+`"}}`)
}

// toolResult finds the tool result for a call ID in a transcript.
func toolResult(msgs []model.Message, callID string) *model.ToolResult {
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.ToolResult != nil && p.ToolResult.CallID == callID {
				return p.ToolResult
			}
		}
	}
	return nil
}
