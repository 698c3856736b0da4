package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/faults"
)

// recStore records every checkpoint saved through it (as JSON copies) and
// can run a hook before each save.
type recStore struct {
	runtime.Store
	saved  []runtime.Checkpoint
	before func(cp *runtime.Checkpoint)
}

func (s *recStore) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if s.before != nil {
		s.before(cp)
	}
	err := s.Store.SaveCheckpoint(ctx, cp)
	if err == nil {
		var c runtime.Checkpoint
		b, _ := json.Marshal(cp)
		_ = json.Unmarshal(b, &c)
		s.saved = append(s.saved, c)
	}
	return err
}

func recAttempt(e *env, rs **recStore) (*runtime.Result, error) {
	*rs = &recStore{Store: e.Store()}
	return runtime.Run(context.Background(), e.Input(*rs))
}

func mustRun(t *testing.T, in runtime.Input) *runtime.Reply {
	t.Helper()
	res, err := runtime.Run(context.Background(), in)
	if err != nil || res == nil || res.Reply == nil {
		t.Fatalf("run did not complete: %+v, %v", res, err)
	}
	return res.Reply
}

func mustComplete(t *testing.T, res *runtime.Result, err error) *runtime.Reply {
	t.Helper()
	if err != nil || res == nil || res.Reply == nil {
		t.Fatalf("run did not complete: %+v, %v", res, err)
	}
	return res.Reply
}

// ---- Host integration ----

func TestC1_MissingInputFailsBeforeAnyWrite(t *testing.T) {
	var nilCtrl *runtimetest.Controller
	tests := []struct {
		name  string
		field string
		mut   func(in *runtime.Input)
	}{
		{"no definition slug", "Definition.Slug", func(in *runtime.Input) { in.Definition.Slug = "" }},
		{"bad slug", "Definition.Slug", func(in *runtime.Input) { in.Definition.Slug = "a b" }},
		{"no output schema", "Definition.OutputSchema", func(in *runtime.Input) { in.Definition.OutputSchema = nil }},
		{"bad output schema", "Definition.OutputSchema", func(in *runtime.Input) { in.Definition.OutputSchema = json.RawMessage(`{"type":"strin"}`) }},
		{"no model", "Model", func(in *runtime.Input) { in.Model = nil }},
		{"model options not JSON", "Definition.ModelOptions", func(in *runtime.Input) { in.Definition.ModelOptions = json.RawMessage(`{temperature: 1}`) }},
		{"no limits", "ModelLimits.ContextTokens", func(in *runtime.Input) { in.ModelLimits = runtime.ModelLimits{} }},
		{"output limit too big", "ModelLimits.OutputTokens", func(in *runtime.Input) { in.ModelLimits.OutputTokens = in.ModelLimits.ContextTokens }},
		{"no store", "Store", func(in *runtime.Input) { in.Store = nil }},
		{"no backend", "Backend", func(in *runtime.Input) { in.Backend = nil }},
		{"no executor factory", "ExecutorFactory", func(in *runtime.Input) { in.ExecutorFactory = nil }},
		{"no controller", "Controller", func(in *runtime.Input) { in.Controller = nil }},
		{"typed nil controller", "Controller", func(in *runtime.Input) { in.Controller = nilCtrl }},
		{"no sink", "Sink", func(in *runtime.Input) { in.Sink = nil }},
		{"no redactor", "Redactor", func(in *runtime.Input) { in.Redactor = nil }},
		{"negative steps", "Budget.Steps", func(in *runtime.Input) { in.Budget.Steps = -1 }},
		{"capability without schema", "Capabilities[0].InputSchema", func(in *runtime.Input) { in.Capabilities[0].InputSchema = nil }},
		{"capability bad name", "Capabilities[0].Name", func(in *runtime.Input) { in.Capabilities[0].Name = "kv get" }},
		{"capability bad effect", "Capabilities[0].Effect", func(in *runtime.Input) { in.Capabilities[0].Effect = "harmless" }},
		{"capability duplicate", "Capabilities[1].Name", func(in *runtime.Input) { in.Capabilities = append(in.Capabilities, in.Capabilities[0]) }},
		{"capability name and namespace", "Capabilities", func(in *runtime.Input) {
			in.Capabilities = append(in.Capabilities, runtime.Capability{Name: "kv", InputSchema: json.RawMessage(`{}`)})
		}},
		{"capability remote ref", "Capabilities[0].InputSchema", func(in *runtime.Input) {
			in.Capabilities[0].InputSchema = json.RawMessage(`{"$ref":"http://127.0.0.1:1/schema.json"}`)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, calls(completeOutput("c1", "x")))
			in := e.Input(e.Store())
			e.Faults.Set(nil) // count operations from here
			tc.mut(&in)
			res, err := runtime.Run(context.Background(), in)
			var ie *runtime.InputError
			if res != nil || !errors.As(err, &ie) || !errors.Is(err, runtime.ErrInvalidInput) {
				t.Fatalf("Run = %+v, %v; want an InputError", res, err)
			}
			if ie.Field != tc.field {
				t.Fatalf("error names field %q (%v), want %q", ie.Field, err, tc.field)
			}
			if e.Faults.Ops() != 0 || len(e.Model.Requests()) != 0 || totalCalls(e.Ctrl) != 0 {
				t.Fatalf("invalid input touched the store (%d ops), model or controller", e.Faults.Ops())
			}
		})
	}
}

func TestC2_FreshRunNeedsMessage(t *testing.T) {
	e := newEnv(t, calls(completeOutput("c1", "x")))
	e.Message = "  "
	_, err := e.Attempt()
	var ie *runtime.InputError
	if !errors.As(err, &ie) || ie.Field != "Message" {
		t.Fatalf("err = %v, want InputError for Message", err)
	}
	if e.Checkpoint() != nil || len(e.History()) != 0 {
		t.Fatal("an empty message wrote something")
	}
}

func TestC2_ResumeIgnoresMessage(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`)),
		calls(call("c2", "wait_calls", `{"ids":["c1"]}`)),
		calls(completeOutput("c3", "x")))
	if _, err := e.Attempt(); !errors.Is(err, runtime.ErrWaiting) {
		t.Fatalf("first attempt: %v, want ErrWaiting", err)
	}
	e.Ctrl.FinishChildren()
	e.Message = "a different message"
	e.Complete()
	users := 0
	for _, m := range e.History() {
		if m.Role == model.RoleUser {
			users++
			if m.Text() != "What is the answer?" {
				t.Fatalf("user message %q", m.Text())
			}
		}
	}
	if users != 1 {
		t.Fatalf("%d user messages, want 1", users)
	}
}

func TestC3_SubagentsMustCoverDefinitionExactly(t *testing.T) {
	tests := []struct {
		name  string
		field string
		mut   func(e *env)
	}{
		{"missing", "Subagents", func(e *env) { e.Subs = e.Subs[:1] }},
		{"extra", "Subagents[2]", func(e *env) {
			e.Subs = append(e.Subs, runtime.AgentDefinition{Slug: "extra", InputSchema: json.RawMessage(textSchema), OutputSchema: json.RawMessage(outputSchema)})
		}},
		{"duplicate", "Subagents[2]", func(e *env) { e.Subs = append(e.Subs, e.Subs[0]) }},
		{"duplicate in definition", "Definition.Subagents[2]", func(e *env) { e.Def.Subagents = append(e.Def.Subagents, "summarizer") }},
		{"no input schema", "Subagents[0].InputSchema", func(e *env) { e.Subs[0].InputSchema = nil }},
		{"non-object input schema", "Subagents[0].InputSchema", func(e *env) { e.Subs[0].InputSchema = json.RawMessage(`{"type":"string"}`) }},
		{"sanitized collision", "Subagents[2].Slug", func(e *env) {
			e.Def.Subagents = append(e.Def.Subagents, "Fact.Checker")
			e.Subs = append(e.Subs, runtime.AgentDefinition{Slug: "Fact.Checker", InputSchema: json.RawMessage(textSchema), OutputSchema: json.RawMessage(outputSchema)})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, calls(completeOutput("c1", "x")))
			tc.mut(e)
			_, err := e.Attempt()
			var ie *runtime.InputError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("err = %v, want InputError for %s", err, tc.field)
			}
		})
	}
}

func TestC4_OnlyHostCapabilitiesAreBound(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "run_js", `{"code":"call kv.get {\"key\":\"a\"}\ncall kv.put {\"key\":\"a\"}"}`)),
		calls(completeOutput("c2", "x")))
	var bound []jstool.CapabilityInfo
	factory := factoryFunc(func(ctx context.Context, cfg jstool.Config) (jstool.Executor, error) {
		bound = cfg.Capabilities
		return e.Execs.NewExecutor(ctx, cfg)
	})
	in := e.Input(e.Store())
	in.ExecutorFactory = factory
	mustRun(t, in)
	if len(bound) != 1 || bound[0].Name != "kv.get" {
		t.Fatalf("bound capabilities = %+v, want exactly kv.get", bound)
	}
	calls := e.Backend.Calls()
	if len(calls) != 1 || calls[0].Capability != "kv.get" || calls[0].ScriptCallID != "c1" || calls[0].Seq != 1 {
		t.Fatalf("backend calls = %+v: the unbound kv.put must never reach the backend", calls)
	}
	res := toolResult(e.History(), "c1")
	if !res.IsError || !strings.Contains(res.Content, "#1 caps.kv.get") {
		t.Fatalf("c1 result = %+v: the failure must list the completed kv.get (C22)", res)
	}
}

type factoryFunc func(ctx context.Context, cfg jstool.Config) (jstool.Executor, error)

func (f factoryFunc) NewExecutor(ctx context.Context, cfg jstool.Config) (jstool.Executor, error) {
	return f(ctx, cfg)
}

func TestC5_RecoveryNoticeGoesToNextRequestOnly(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	e.Notice = "the worker restarted at 12:00"
	e.Complete()
	reqs := e.Model.Requests()
	last := reqs[0].Messages[len(reqs[0].Messages)-1]
	if !strings.Contains(last.Text(), "the worker restarted") {
		t.Fatalf("first request does not end with the notice: %q", last.Text())
	}
	for _, m := range reqs[1].Messages {
		if strings.Contains(m.Text(), "restarted") {
			t.Fatal("the notice was sent twice")
		}
	}
	for _, m := range e.History() {
		if strings.Contains(m.Text(), "restarted") {
			t.Fatal("the notice was committed to the transcript")
		}
	}
}

func TestC6_WaitingAndContinuation(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"]}`)),
		calls(call("c3", "complete", `{"type":"needs_input","question":"More?"}`)))
	res, err := e.Attempt()
	if !errors.Is(err, runtime.ErrWaiting) || res == nil || !res.Waiting || res.WaitCallID != "c2" || res.Reply != nil {
		t.Fatalf("attempt = %+v, %v; want Result{Waiting: true, WaitCallID: c2} with ErrWaiting", res, err)
	}
	e.Ctrl.FinishChildren()
	reply := e.Complete()
	if reply.Type != runtime.ReplyNeedsInput || reply.Question != "More?" {
		t.Fatalf("reply = %+v", reply)
	}
	// A continuation is a new run in the same session: fresh checkpoint,
	// the earlier transcript in its window.
	e.Run, e.Message, e.IDs = "r2", "Yes, more.", runtimetest.FixedID("run2")
	e.Model = &model.Scripted{Steps: []model.Response{calls(completeOutput("c9", "more"))}}
	e.Ctrl = &runtimetest.Controller{}
	reply = e.Complete()
	if reply.Type != runtime.ReplyOutput {
		t.Fatalf("continuation reply = %+v", reply)
	}
	if cp := e.Checkpoint(); cp.Revision != 3 || cp.RunKey != "run2" {
		t.Fatalf("continuation checkpoint revision %d, want 3 of a new run", cp.Revision)
	}
	req := e.Model.Requests()[0]
	if got := req.Messages[0].Text(); got != "What is the answer?" {
		t.Fatalf("continuation window starts with %q, want the first run's message", got)
	}
}

func TestC7_ReinvokingCompletedRunTouchesNothing(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	first := e.Complete()
	reqs, ctrl, allocs := len(e.Model.Requests()), totalCalls(e.Ctrl), e.Execs.Allocs()
	e.Model.StepErrors = map[int]error{0: errors.New("must not be called")}
	second := e.Complete()
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("second reply %+v, first %+v", second, first)
	}
	if len(e.Model.Requests()) != reqs || totalCalls(e.Ctrl) != ctrl || e.Execs.Allocs() != allocs {
		t.Fatal("reinvocation touched the model, controller or executor")
	}
}

func TestC8_CleanupErrors(t *testing.T) {
	closeErr := errors.New("realm teardown failed")
	t.Run("completed", func(t *testing.T) {
		e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
		e.Execs.CloseErr = closeErr
		res, err := e.Attempt()
		if err != nil || res == nil || res.Reply == nil || !errors.Is(res.CleanupError, closeErr) {
			t.Fatalf("= %+v, %v; want the reply, a nil error and CleanupError", res, err)
		}
		// Cleanup diagnostics are never persisted.
		cpJSON, _ := json.Marshal(e.Checkpoint())
		histJSON, _ := json.Marshal(e.History())
		if strings.Contains(string(cpJSON)+string(histJSON), closeErr.Error()) {
			t.Fatalf("the cleanup failure reached the durable state: %s %s", cpJSON, histJSON)
		}
	})
	t.Run("waiting", func(t *testing.T) {
		e := newEnv(t, calls(call("c0", "run_js", `{"code":"return 1"}`), call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"]}`)))
		e.Execs.CloseErr = closeErr
		res, err := e.Attempt()
		if res == nil || !res.Waiting || !errors.Is(res.CleanupError, closeErr) || !errors.Is(err, runtime.ErrWaiting) || !errors.Is(err, closeErr) {
			t.Fatalf("= %+v, %v; want Waiting, CleanupError and both in the error", res, err)
		}
	})
	t.Run("failed", func(t *testing.T) {
		modelErr := errors.New("provider down")
		e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
		e.Model.StepErrors = map[int]error{1: modelErr}
		e.Execs.CloseErr = closeErr
		res, err := e.Attempt()
		if res != nil || !errors.Is(err, modelErr) || !errors.Is(err, closeErr) {
			t.Fatalf("= %+v, %v; want no result and both errors in the chain", res, err)
		}
	})
	t.Run("unacknowledged completion is an execution error", func(t *testing.T) {
		e := newEnv(t, calls(completeOutput("c1", "x")))
		e.Faults.Set(func(op faults.Op, i int) faults.Mode {
			if op == faults.SaveCheckpoint && i > 2 {
				return faults.After
			}
			return faults.None
		})
		res, err := e.Attempt()
		if res != nil || !errors.Is(err, faults.ErrInjected) {
			t.Fatalf("= %+v, %v; a lost acknowledgement is not proof of completion", res, err)
		}
		e.Faults.Set(nil)
		e.Complete() // recovery loads the durable completion
		if e.Ctrl.Count("Complete") != 1 {
			t.Fatalf("Complete called %d times; the durable reply must be returned as is", e.Ctrl.Count("Complete"))
		}
	})
}

func TestC9_ContractAndVersionVerifiedOnResume(t *testing.T) {
	tests := []struct {
		name string
		mut  func(e *env)
		ok   bool
	}{
		{"instructions changed", func(e *env) { e.Def.Instructions += " Be brief." }, false},
		{"output schema changed", func(e *env) { e.Def.OutputSchema = json.RawMessage(`{"type":"object"}`) }, false},
		{"child schema changed", func(e *env) { e.Subs[1].InputSchema = json.RawMessage(claimSchema) }, false},
		{"capability added", func(e *env) {
			e.Caps = append(e.Caps, runtime.Capability{Name: "kv.put", InputSchema: json.RawMessage(`{"type":"object"}`)})
		}, false},
		{"schema whitespace and key order only", func(e *env) {
			e.Def.OutputSchema = json.RawMessage(`{ "additionalProperties": false, "properties": {"answer": {"type": "string"}}, "required": ["answer"], "type": "object" }`)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"]}`)), calls(completeOutput("c3", "x")))
			if _, err := e.Attempt(); !errors.Is(err, runtime.ErrWaiting) {
				t.Fatal(err)
			}
			e.Ctrl.FinishChildren()
			tc.mut(e)
			before := len(e.Model.Requests())
			res, err := e.Attempt()
			if tc.ok {
				mustComplete(t, res, err)
				return
			}
			if !errors.Is(err, runtime.ErrContractMismatch) || len(e.Model.Requests()) != before || e.Ctrl.Count("BeforeModel") != 1 {
				t.Fatalf("= %v; want ErrContractMismatch before model work", err)
			}
		})
	}
	t.Run("version", func(t *testing.T) {
		e := newEnv(t, calls(completeOutput("c1", "x")))
		s := e.Store()
		bad := &runtime.Checkpoint{Version: runtime.CheckpointVersion + 1, Revision: 1, RunKey: "k", Phase: runtime.PhaseModel}
		if err := s.SaveCheckpoint(context.Background(), bad); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Attempt(); !errors.Is(err, runtime.ErrContractMismatch) || len(e.Model.Requests()) != 0 {
			t.Fatalf("err = %v; want ErrContractMismatch and no model call", err)
		}
	})
}

func TestC10_ModelIDsNeverEstablishAuthority(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "get_calls", `{"ids":["someone-elses-call"]}`), call("c2", "run_js", `{"code":"call admin.drop {}"}`)),
		calls(completeOutput("c3", "x")))
	e.Complete()
	h := e.History()
	if r := toolResult(h, "c1"); !r.IsError || !strings.Contains(r.Content, "not a child of this run") {
		t.Fatalf("get of a foreign call = %+v: the host's refusal must reach the model", r)
	}
	if e.Ctrl.CountFor("Get", "someone-elses-call") != 1 {
		t.Fatal("the runtime must ask the host, not decide from the ID")
	}
	if len(e.Backend.Calls()) != 0 {
		t.Fatalf("an unbound capability reached the backend: %+v", e.Backend.Calls())
	}
}

// ---- Store (the runtime's side; the stores' side is storetest) ----

func TestC12_C13_C14_CommitsCarryTheirOwnAppendOnly(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"]}`)),
		calls(completeOutput("c3", "x")))
	var rs1, rs2 *recStore
	if _, err := recAttempt(e, &rs1); !errors.Is(err, runtime.ErrWaiting) {
		t.Fatal(err)
	}
	e.Ctrl.FinishChildren()
	// The memory store returns the last Append with the checkpoint; the
	// runtime must not commit it again (C14).
	if cp := e.Checkpoint(); len(cp.Append) == 0 {
		t.Fatal("the memory store should return the last payload for this test to mean something")
	}
	res, err := recAttempt(e, &rs2)
	mustComplete(t, res, err)
	var appended []string
	rev := int64(0)
	for _, cp := range append(rs1.saved, rs2.saved...) {
		if cp.Revision != rev+1 {
			t.Fatalf("revision %d follows %d (C13)", cp.Revision, rev)
		}
		rev = cp.Revision
		for _, m := range cp.Append {
			appended = append(appended, m.ID)
		}
	}
	if got := fmt.Sprint(ids(e.History())); got != fmt.Sprint(appended) {
		t.Fatalf("transcript %s is not exactly the commits' appends %v (C12)", got, appended)
	}
}

func ids(msgs []model.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

func TestC16_MessageIDsAndProviderMetadataPersist(t *testing.T) {
	resp := calls(call("c1", "run_js", `{"code": "return 1"}`))
	resp.Message.Meta = map[string][]byte{"openai.response_id": []byte("resp_123")}
	resp.Message.Parts = append([]model.Part{{Type: model.PartReasoning, Text: "think", Meta: map[string][]byte{"anthropic.signature": {0xde, 0xad, 0xbe, 0xef}}}}, resp.Message.Parts...)
	e := newEnv(t, resp, calls(completeOutput("c2", "x")))
	e.Complete()
	h := e.History()
	got := h[1]
	if got.Role != model.RoleAssistant || got.ID == "" {
		t.Fatalf("assistant message = %+v", got)
	}
	if string(got.Meta["openai.response_id"]) != "resp_123" || !reflect.DeepEqual(got.Parts[0].Meta["anthropic.signature"], []byte{0xde, 0xad, 0xbe, 0xef}) {
		t.Fatalf("metadata lost: %+v", got)
	}
	if got.Parts[1].ToolCall.Args != `{"code": "return 1"}` {
		t.Fatalf("arguments re-encoded: %q", got.Parts[1].ToolCall.Args)
	}
	// The next request carries the same IDs and metadata back.
	next := e.Model.Requests()[1].Messages[1]
	if next.ID != got.ID || !reflect.DeepEqual(next.Meta, got.Meta) || !reflect.DeepEqual(next.Parts[0].Meta, got.Parts[0].Meta) {
		t.Fatalf("request message %+v differs from the stored %+v", next, got)
	}
}

func TestC17_CompletionAndItsAppendsAreOneCommit(t *testing.T) {
	e := newEnv(t, calls(completeOutput("c1", "x"), call("c2", "run_js", `{"code":"return 1"}`)))
	var rs *recStore
	res, err := recAttempt(e, &rs)
	mustComplete(t, res, err)
	last := rs.saved[len(rs.saved)-1]
	if last.Reply == nil || last.Phase != runtime.PhaseCompleted || len(last.Append) != 2 {
		t.Fatalf("completion commit = %+v; want the reply with complete's and the skipped call's results", last)
	}
}

func TestC18_FencedOutWriterStops(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	old := e.Store()
	_ = e.Store() // a newer attempt takes the lease
	_, err := runtime.Run(context.Background(), e.Input(old))
	if !errors.Is(err, runtime.ErrLeaseLost) || len(e.Model.Requests()) != 0 {
		t.Fatalf("err = %v; want ErrLeaseLost before any model work", err)
	}
}

// ---- Checkpoint phases ----

func TestC19_EveryCallHasPredispatchAndPostresult(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "run_js", `{"code":"return 1"}`), call("c2", "spawn_summarizer", `{"text":"t"}`), call("c3", "get_calls", `{"ids":["c2"]}`)),
		calls(call("c4", "cancel_calls", `{"ids":["c2"]}`), completeOutput("c5", "x")))
	var rs *recStore
	res, err := recAttempt(e, &rs)
	mustComplete(t, res, err)
	for _, id := range []string{"c1", "c2", "c3", "c4", "c5"} {
		pre, post := -1, -1
		for i, cp := range rs.saved {
			for _, c := range cp.Calls {
				if c.ID == id && c.State == runtime.CallDispatching && pre < 0 {
					pre = i
				}
				if c.ID == id && c.State.Terminal() && post < 0 {
					post = i
				}
			}
		}
		if pre < 0 || post <= pre {
			t.Fatalf("call %s: predispatch commit %d, postresult commit %d", id, pre, post)
		}
	}
}

func TestC20_InterruptedCallsBecomeUnknownEffect(t *testing.T) {
	for _, tc := range []struct{ tool, args string }{
		{"run_js", `{"code":"return 1"}`},
		{"get_calls", `{"ids":["c0"]}`},
		{"cancel_calls", `{"ids":["c0"]}`},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			e := newEnv(t,
				calls(call("c0", "spawn_summarizer", `{"text":"t"}`)),
				calls(call("c1", tc.tool, tc.args)),
				calls(completeOutput("c2", "x")))
			// Lose the postresult of c1: fail the first save after its
			// dispatch, before it commits.
			failed := false
			var rs *recStore
			rs = &recStore{Store: e.Store(), before: func(cp *runtime.Checkpoint) {
				if !failed && len(cp.Calls) == 1 && cp.Calls[0].ID == "c1" && cp.Calls[0].State.Terminal() {
					failed = true
					e.Faults.Set(faults.At(0, faults.Before))
				}
			}}
			if _, err := runtime.Run(context.Background(), e.Input(rs)); !errors.Is(err, faults.ErrInjected) {
				t.Fatalf("first attempt: %v", err)
			}
			e.Faults.Set(nil)
			e.Ctrl.FinishChildren()
			e.Complete()
			r := toolResult(e.History(), "c1")
			if r == nil || !r.IsError || !strings.HasPrefix(r.Content, "Unknown effect:") {
				t.Fatalf("c1 result = %+v, want an unknown-effect notice", r)
			}
			if tc.tool == "run_js" && !strings.Contains(r.Content, "read-only (changed nothing; safe to call again): caps.kv.get") {
				t.Fatalf("the notice does not tell the capabilities' effect classes:\n%s", r.Content)
			}
			if e.Execs.Executed("c1")+e.Ctrl.CountFor("Get", "c0")+e.Ctrl.CountFor("Cancel", "c0") != 1 {
				t.Fatal("the interrupted call was dispatched again")
			}
		})
	}
	t.Run("interrupted before the actual dispatch", func(t *testing.T) {
		e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
		ctx, cancel := context.WithCancel(context.Background())
		e.Execs.NewErr = nil
		in := e.Input(e.Store())
		in.ExecutorFactory = factoryFunc(func(c context.Context, cfg jstool.Config) (jstool.Executor, error) {
			cancel() // the process dies while allocating the realm
			return nil, context.Canceled
		})
		if _, err := runtime.Run(ctx, in); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		e.Complete()
		if r := toolResult(e.History(), "c1"); !strings.HasPrefix(r.Content, "Unknown effect:") || e.Execs.Executed("c1") != 0 {
			t.Fatalf("c1 = %+v, executed %d", r, e.Execs.Executed("c1"))
		}
	})
}

func TestC21_ToolFailuresAreCommittedAsToolErrors(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "run_js", `{"code":"throw boom"}`), call("c2", "continue_agent", `{"session_id":"nope","prompt":"p"}`)),
		calls(completeOutput("c3", "x")))
	e.Complete()
	h := e.History()
	for _, id := range []string{"c1", "c2"} {
		if r := toolResult(h, id); r == nil || !r.IsError {
			t.Fatalf("%s = %+v, want a committed tool error", id, r)
		}
	}
}

func TestC22_FailedScriptListsCompletedCallbacks(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"call kv.get {\"key\":\"a\"}\ncall kv.get {\"key\":\"b\"}\nthrow boom"}`)), calls(completeOutput("c2", "x")))
	e.Complete()
	r := toolResult(e.History(), "c1")
	for _, want := range []string{"#1 caps.kv.get", "#2 caps.kv.get", "Do not rerun the whole script", "boom"} {
		if !strings.Contains(r.Content, want) {
			t.Fatalf("failure text lacks %q:\n%s", want, r.Content)
		}
	}
}

func TestC23_FatalErrorsStopTheAttempt(t *testing.T) {
	fatal := runtime.Fatal(errors.New("host lost its lease"))
	modelErr := errors.New("provider: 503")
	tests := []struct {
		name string
		mut  func(e *env, in *runtime.Input) context.Context
		want error
	}{
		{"store error", func(e *env, in *runtime.Input) context.Context {
			e.Faults.Set(func(op faults.Op, i int) faults.Mode {
				if op == faults.SaveCheckpoint && i > 3 {
					return faults.Before
				}
				return faults.None
			})
			return context.Background()
		}, faults.ErrInjected},
		{"model error", func(e *env, in *runtime.Input) context.Context {
			e.Model.StepErrors = map[int]error{0: modelErr}
			return context.Background()
		}, modelErr},
		{"cancelled context", func(e *env, in *runtime.Input) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled},
		{"fatal controller error", func(e *env, in *runtime.Input) context.Context {
			in.Controller = fatalSpawn{e.Ctrl, fatal}
			return context.Background()
		}, fatal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c3", "x")))
			in := e.Input(e.Store())
			ctx := tc.mut(e, &in)
			_, err := runtime.Run(ctx, in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if e.Execs.Executed("c2") != 0 {
				t.Fatal("the attempt went on after a fatal error")
			}
		})
	}
}

type fatalSpawn struct {
	*runtimetest.Controller
	err error
}

func (f fatalSpawn) Spawn(context.Context, string, string, []byte) (runtime.AgentRunInfo, error) {
	return runtime.AgentRunInfo{}, f.err
}

// C41: the executor is allocated lazily (a run that never calls run_js
// allocates none; one that does, one per attempt) and closed on every exit:
// completion, waiting and failure.
func TestC41_ExecutorLazyAndClosedOnEveryExit(t *testing.T) {
	modelErr := errors.New("provider down")
	tests := []struct {
		name    string
		steps   []model.Response
		stepErr map[int]error
		allocs  int
	}{
		{"no run_js", []model.Response{calls(completeOutput("c1", "x"))}, nil, 0},
		{"completed", []model.Response{calls(call("c1", "run_js", `{"code":"return 1"}`), call("c2", "run_js", `{"code":"return 2"}`)), calls(completeOutput("c3", "x"))}, nil, 1},
		{"waiting", []model.Response{calls(call("c0", "run_js", `{"code":"return 1"}`), call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"]}`))}, nil, 1},
		{"failed", []model.Response{calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x"))}, map[int]error{1: modelErr}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.steps...)
			e.Model.StepErrors = tc.stepErr
			_, _ = e.Attempt()
			if got := e.Execs.Allocs(); got != tc.allocs {
				t.Fatalf("%d executors allocated, want %d", got, tc.allocs)
			}
			if open := e.Execs.Open(); open != 0 {
				t.Fatalf("%d executors left open after the attempt", open)
			}
		})
	}
}
