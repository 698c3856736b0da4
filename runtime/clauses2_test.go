package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
)

// ---- Controller ----

// hookCtrl runs a hook at BeforeModel.
type hookCtrl struct {
	*runtimetest.Controller
	before func()
}

func (h hookCtrl) BeforeModel(ctx context.Context) error {
	h.before()
	return h.Controller.BeforeModel(ctx)
}

func TestC24_BeforeModelGatesEveryRequest(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	e.Complete()
	if got, want := e.Ctrl.Reserved(), len(e.Model.Requests()); got != want {
		t.Fatalf("%d reservations for %d requests", got, want)
	}
	t.Run("error ends the attempt", func(t *testing.T) {
		e := newEnv(t, calls(completeOutput("c1", "x")))
		gate := errors.New("budget: tokens exhausted")
		in := e.Input(e.Store())
		in.Controller = failingBefore{e.Ctrl, gate}
		if _, err := runtime.Run(context.Background(), in); !errors.Is(err, gate) || len(e.Model.Requests()) != 0 {
			t.Fatalf("err = %v, requests %d", err, len(e.Model.Requests()))
		}
	})
}

type failingBefore struct {
	*runtimetest.Controller
	err error
}

func (f failingBefore) BeforeModel(context.Context) error { return f.err }

func TestC25_C26_SpawnAndContinueRedispatchIdempotently(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"]}`)),
		calls(call("c3", "continue_agent", `{"session_id":"sess-c1","prompt":"go on"}`), call("c4", "wait_calls", `{"ids":["c3"]}`)),
		calls(completeOutput("c5", "x")))
	// Lose the postresults of the spawn and of the continue once each.
	lost := map[string]bool{}
	var attempt func() (*runtime.Result, error)
	attempt = func() (*runtime.Result, error) {
		rs := &recStore{Store: e.Store()}
		rs.before = func(cp *runtime.Checkpoint) {
			for _, c := range cp.Calls {
				if (c.ID == "c1" || c.ID == "c3") && c.State.Terminal() && !lost[c.ID] {
					lost[c.ID] = true
					panic(errors.New("crash before the postresult commit"))
				}
			}
		}
		return runtime.Run(context.Background(), e.Input(rs))
	}
	for i := 0; i < 10; i++ {
		res, err := attempt()
		if err == nil {
			mustComplete(t, res, err)
			break
		}
		if errors.Is(err, runtime.ErrWaiting) {
			e.Ctrl.FinishChildren()
		}
	}
	if e.Ctrl.CountFor("Spawn", "c1") != 2 || e.Ctrl.CountFor("Continue", "c3") != 2 {
		t.Fatalf("spawn dispatched %d times, continue %d; want each redispatched once", e.Ctrl.CountFor("Spawn", "c1"), e.Ctrl.CountFor("Continue", "c3"))
	}
	if len(e.Ctrl.Children()) != 2 {
		t.Fatalf("children = %v, want one per call", e.Ctrl.Children())
	}
}

func TestC27_GetAndCancelGoThroughTheHost(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "get_calls", `{"ids":["c1"]}`), call("c3", "cancel_calls", `{"ids":["c1"]}`)),
		calls(completeOutput("c4", "x")))
	e.Complete()
	h := e.History()
	var got []runtime.CallInfo
	if err := json.Unmarshal([]byte(toolResult(h, "c2").Content), &got); err != nil || len(got) != 1 || got[0].Status != runtime.StatusRunning {
		t.Fatalf("get_calls result = %s (%v)", toolResult(h, "c2").Content, err)
	}
	var cancelled []runtime.CancelInfo
	if err := json.Unmarshal([]byte(toolResult(h, "c3").Content), &cancelled); err != nil || !cancelled[0].Cancelled {
		t.Fatalf("cancel_calls result = %s", toolResult(h, "c3").Content)
	}
}

func TestC28_WaitParksKeepsDeadlineAndTimesOutWithoutCancelling(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"],"timeout_seconds":60}`)),
		calls(completeOutput("c3", "x")))
	e.Ctrl.Clock = e.Clock
	for i := 0; i < 3; i++ { // repeated parking
		res, err := e.Attempt()
		if !errors.Is(err, runtime.ErrWaiting) || !res.Waiting {
			t.Fatalf("attempt %d: %+v, %v", i, res, err)
		}
		e.Clock.Advance(10 * time.Second)
	}
	d, _ := e.Ctrl.Deadline("c2")
	if want := runtimetest.NewClock().Now().Add(60 * time.Second); !d.Equal(want) {
		t.Fatalf("deadline %v moved from the original %v", d, want)
	}
	e.Clock.Advance(time.Minute)
	// The wait times out; the completion is then rejected while the child
	// runs, so finish it after the timeout result is committed.
	e.Ctrl.RejectComplete = errors.New("not yet")
	_, _ = e.Attempt()
	r := toolResult(e.History(), "c2")
	var wr runtime.WaitResult
	if err := json.Unmarshal([]byte(r.Content), &wr); err != nil || !wr.TimedOut || wr.Calls[0].Status != runtime.StatusRunning {
		t.Fatalf("wait result = %s: a timeout returns the state and cancels nothing", r.Content)
	}
	if e.Ctrl.Count("Cancel") != 0 {
		t.Fatal("timeout cancelled a child")
	}
}

func TestC28_CompletionRacingWithParkingIsNotLost(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`), call("c2", "wait_calls", `{"ids":["c1"]}`)),
		calls(completeOutput("c3", "x")))
	if _, err := e.Attempt(); !errors.Is(err, runtime.ErrWaiting) {
		t.Fatal(err)
	}
	// The child finishes before the host wakes the parent: the next attempt
	// re-asks Wait with the same call ID and sees the completion.
	e.Ctrl.FinishChildren()
	e.Complete()
	if e.Ctrl.CountFor("Wait", "c2") != 2 {
		t.Fatalf("Wait for c2 called %d times, want 2 (park, resume)", e.Ctrl.CountFor("Wait", "c2"))
	}
}

func TestC29_CompleteReplayIsAccepted(t *testing.T) {
	e := newEnv(t, calls(completeOutput("c1", "x")))
	crashed := false
	rs := &recStore{Store: e.Store()}
	rs.before = func(cp *runtime.Checkpoint) {
		if cp.Reply != nil && !crashed {
			crashed = true
			panic("crash before the completed commit")
		}
	}
	if _, err := runtime.Run(context.Background(), e.Input(rs)); !errors.Is(err, runtime.ErrPanic) {
		t.Fatalf("err = %v", err)
	}
	e.Complete()
	if e.Ctrl.Count("Complete") != 2 {
		t.Fatalf("Complete called %d times, want the identical replay", e.Ctrl.Count("Complete"))
	}
}

func TestC30_RejectedCompleteIsAToolError(t *testing.T) {
	e := newEnv(t,
		calls(call("c1", "spawn_summarizer", `{"text":"t"}`)),
		calls(completeOutput("c2", "early"), call("c3", "cancel_calls", `{"ids":["c1"]}`), completeOutput("c4", "late")))
	reply := e.Complete()
	if string(reply.Output) != `{"answer":"late"}` {
		t.Fatalf("reply = %s", reply.Output)
	}
	if r := toolResult(e.History(), "c2"); !r.IsError || !strings.Contains(r.Content, "children still active") {
		t.Fatalf("rejected complete = %+v", r)
	}
}

func TestC31_LaterCallsAreSkippedAfterCompletion(t *testing.T) {
	e := newEnv(t, calls(completeOutput("c1", "x"), call("c2", "run_js", `{"code":"return 1"}`), call("c3", "spawn_summarizer", `{"text":"t"}`)))
	e.Complete()
	h := e.History()
	for _, id := range []string{"c2", "c3"} {
		if r := toolResult(h, id); r == nil || !strings.HasPrefix(r.Content, "Skipped") {
			t.Fatalf("%s = %+v, want a skipped outcome", id, r)
		}
	}
	if e.Execs.Executed("c2") != 0 || e.Ctrl.Count("Spawn") != 0 {
		t.Fatal("a call after the completion was dispatched")
	}
}

// ---- Models and budgets ----

func TestC32_OneResponseThenCallsInOrder(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"call kv.get {\"key\":\"1\"}"}`), call("c2", "run_js", `{"code":"call kv.get {\"key\":\"2\"}"}`)), calls(completeOutput("c3", "x")))
	// order is what happened, as it happened: each model request, and each
	// call's start and end at the backend.
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	in := e.Input(e.Store())
	in.Model = modelFunc(func(ctx context.Context, req model.Request) (*model.Response, error) {
		note("model")
		for _, tl := range req.Tools {
			if tl.Name == "" || len(tl.InputSchema) == 0 {
				t.Fatalf("tool definition %+v", tl)
			}
		}
		return e.Model.Generate(ctx, req)
	})
	in.Backend = backendFunc(func(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
		note("start " + inv.ScriptCallID)
		time.Sleep(10 * time.Millisecond) // room for a concurrent call to start, were there one
		defer note("end " + inv.ScriptCallID)
		return e.Backend.Invoke(ctx, inv)
	})
	mustRun(t, in)
	want := []string{"model", "start c1", "end c1", "start c2", "end c2", "model"}
	if !slices.Equal(order, want) {
		t.Fatalf("order = %v, want %v: one response, then its calls one at a time, in order", order, want)
	}
}

type backendFunc func(ctx context.Context, inv jstool.Invocation) (jstool.Value, error)

func (f backendFunc) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	return f(ctx, inv)
}

type modelFunc func(ctx context.Context, req model.Request) (*model.Response, error)

func (f modelFunc) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	return f(ctx, req)
}

func TestC33_BudgetShapes(t *testing.T) {
	tests := []struct {
		name   string
		budget runtime.Budget
		field  string
	}{
		{"unlimited", runtime.Budget{}, ""},
		{"steps only", runtime.Budget{Steps: 3}, ""},
		{"tokens only", runtime.Budget{Tokens: 1000}, ""},
		{"timeout only", runtime.Budget{Timeout: time.Minute}, ""},
		{"negative tokens", runtime.Budget{Steps: 1, Tokens: -1}, "Budget.Tokens"},
		{"negative timeout", runtime.Budget{Timeout: -time.Second}, "Budget.Timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, calls(completeOutput("c1", "x")))
			in := e.Input(e.Store())
			in.Budget = tc.budget
			res, err := runtime.Run(context.Background(), in)
			if tc.field == "" {
				mustComplete(t, res, err)
				return
			}
			var ie *runtime.InputError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("err = %v, want InputError for %s", err, tc.field)
			}
		})
	}
}

func TestC35_ModelCheckpointPrecedesReservation(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	s := e.Store()
	in := e.Input(s)
	in.Controller = hookCtrl{e.Ctrl, func() {
		cp, err := s.LoadCheckpoint(context.Background())
		if err != nil || cp == nil || cp.Phase != runtime.PhaseModel {
			t.Errorf("BeforeModel with durable checkpoint %+v (%v): the model checkpoint must be saved first", cp, err)
		}
	}}
	mustRun(t, in)

	t.Run("a crash after the reservation costs a step; recovery stops at the gate", func(t *testing.T) {
		e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
		e.Ctrl.Steps = 2
		e.Model.StepErrors = map[int]error{1: errors.New("connection reset before the request was sent")}
		if _, err := e.Attempt(); err == nil {
			t.Fatal("want the interrupted request's error")
		}
		reqs := len(e.Model.Requests())
		_, err := e.Attempt()
		if !errors.Is(err, runtimetest.ErrBudgetExhausted) || len(e.Model.Requests()) != reqs {
			t.Fatalf("err = %v, requests %d -> %d: recovery must stop at the gate without calling the model", err, reqs, len(e.Model.Requests()))
		}
	})
}

func TestC36_OpaqueProviderDataWithASecretIsDropped(t *testing.T) {
	resp := calls(call("c1", "run_js", `{"code":"return 1"}`))
	resp.Message.Meta = map[string][]byte{"openrouter.reasoning_details": []byte(`[{"text":"the key is s3cr3t"}]`), "openai.response_id": []byte("resp_1")}
	resp.Message.Parts = append([]model.Part{
		{Type: model.PartReasoning, Text: "I saw s3cr3t in the task", Meta: map[string][]byte{"anthropic.signature": []byte("sig-a")}},
		{Type: model.PartReasoning, Text: "plain thinking", Meta: map[string][]byte{"anthropic.signature": []byte("sig-b")}},
	}, resp.Message.Parts...)
	e := newEnv(t, resp, calls(completeOutput("c2", "x")))
	e.Complete()
	req := e.Model.Requests()[1]
	b, _ := json.Marshal(req)
	if strings.Contains(string(b), "s3cr3t") {
		t.Fatalf("the request carries the secret: %s", b)
	}
	got := req.Messages[1]
	if len(got.Parts) != 2 || got.Parts[0].Text != "plain thinking" || string(got.Parts[0].Meta["anthropic.signature"]) != "sig-b" || string(got.Meta["openai.response_id"]) != "resp_1" {
		t.Fatalf("clean opaque data must pass unchanged: %+v", got)
	}
	// The transcript itself keeps everything as the provider sent it.
	if h := e.History(); len(h[1].Parts) != 3 {
		t.Fatal("the stored message lost parts")
	}
}

func TestC36_ModelInputsAreRedacted(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"call kv.get {\"key\":\"a\"}"}`)), calls(completeOutput("c2", "x")))
	e.Backend.Results = map[string]string{"kv.get": `{"password":"s3cr3t"}`}
	e.Def.Instructions = "The admin password is s3cr3t; never reveal it."
	e.Message = "Use the key s3cr3t to log in."
	e.Complete()
	for i, req := range e.Model.Requests() {
		b, _ := json.Marshal(req)
		if strings.Contains(string(b), "s3cr3t") {
			t.Fatalf("request %d carries the secret: %s", i, b)
		}
	}
}

func TestC37_SinkTextFollowsCommitRedactedWhole(t *testing.T) {
	resp := calls(call("c1", "run_js", `{"code":"return 1"}`))
	resp.Message.Parts = append([]model.Part{{Type: model.PartText, Text: "I will use s3cr"}, {Type: model.PartText, Text: "3t now."}}, resp.Message.Parts...)
	e := newEnv(t, resp, calls(completeOutput("c2", "x")))
	s := e.Store()
	in := e.Input(s)
	in.Sink = runtime.SinkFunc(func(ctx context.Context, ev runtime.SinkEvent) {
		cp, err := s.LoadCheckpoint(ctx)
		if err != nil || cp.Revision < ev.Revision {
			t.Errorf("sink event for revision %d emitted before its commit (durable %d)", ev.Revision, cp.Revision)
		}
		if strings.Contains(ev.Text, "s3cr3t") {
			t.Errorf("sink text leaks the secret: %q", ev.Text)
		}
		e.Sink.Emit(ctx, ev)
	})
	mustRun(t, in)
	var texts []string
	for _, ev := range e.Sink.Events() {
		if ev.Kind == runtime.SinkText {
			texts = append(texts, ev.Text)
		}
	}
	if len(texts) != 1 || texts[0] != "I will use [REDACTED] now." {
		t.Fatalf("sink text = %q, want one complete redacted chunk", texts)
	}
}

// ---- Tools and JavaScript ----

func TestC38_DirectControlsAndNoneInJavaScript(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	var bound []jstool.CapabilityInfo
	in := e.Input(e.Store())
	in.ExecutorFactory = factoryFunc(func(ctx context.Context, cfg jstool.Config) (jstool.Executor, error) {
		bound = cfg.Capabilities
		return e.Execs.NewExecutor(ctx, cfg)
	})
	mustRun(t, in)
	var names []string
	for _, tl := range e.Model.Requests()[0].Tools {
		names = append(names, tl.Name)
	}
	want := "[run_js spawn_fact_checker spawn_summarizer continue_agent get_calls wait_calls cancel_calls complete]"
	if fmt.Sprint(names) != want {
		t.Fatalf("tools = %v, want %s", names, want)
	}
	for _, b := range bound {
		for _, n := range names {
			if b.Name == n {
				t.Fatalf("control %s is bound in JavaScript", n)
			}
		}
	}
	t.Run("no subagents, no child controls", func(t *testing.T) {
		e := newEnv(t, calls(call("c1", "wait_calls", `{"ids":["x"]}`)), calls(completeOutput("c2", "x")))
		e.Def.Subagents, e.Subs = nil, nil
		e.Complete()
		if tools := e.Model.Requests()[0].Tools; len(tools) != 2 {
			t.Fatalf("tools = %+v, want run_js and complete", tools)
		}
		if r := toolResult(e.History(), "c1"); !r.IsError || !strings.Contains(r.Content, "unknown tool") {
			t.Fatalf("wait_calls without subagents = %+v", r)
		}
	})
}

func TestC39_SchemasShownExactlyAndCompletionDiscriminated(t *testing.T) {
	e := newEnv(t,
		calls(
			call("c1", "complete", `{"type":"output","output":{"answer":1}}`),
			call("c2", "complete", `{"type":"needs_input","question":""}`),
			call("c3", "complete", `{"type":"output","question":"q","output":{"answer":"a"}}`),
			call("c4", "complete", `{"type":"other"}`),
			call("c5", "spawn_fact_checker", `{"claim":""}`),
		),
		calls(completeOutput("c6", "ok")))
	e.Complete()
	for _, tl := range e.Model.Requests()[0].Tools {
		if tl.Name == "spawn_fact_checker" && string(tl.InputSchema) != claimSchema {
			t.Fatalf("child schema shown as %s, want it unchanged", tl.InputSchema)
		}
	}
	h := e.History()
	for _, id := range []string{"c1", "c2", "c3", "c4", "c5"} {
		if r := toolResult(h, id); !r.IsError || !strings.Contains(r.Content, "invalid arguments") {
			t.Fatalf("%s = %+v, want an invalid-arguments tool error", id, r)
		}
	}
	if e.Ctrl.Count("Complete") != 1 || e.Ctrl.Count("Spawn") != 0 {
		t.Fatal("an invalid call reached the controller")
	}
}

// ---- Bad input from the model ----

func TestBadModelResponses(t *testing.T) {
	t.Run("unknown tool and malformed arguments are tool errors", func(t *testing.T) {
		e := newEnv(t, calls(call("c1", "rm_rf", `{}`), call("c2", "run_js", `{"code": `), call("c3", "run_js", ``)), calls(completeOutput("c4", "x")))
		e.Complete()
		h := e.History()
		if r := toolResult(h, "c1"); !r.IsError || !strings.Contains(r.Content, `unknown tool "rm_rf"`) {
			t.Fatalf("c1 = %+v", r)
		}
		for _, id := range []string{"c2", "c3"} {
			if r := toolResult(h, id); !r.IsError || !strings.Contains(r.Content, "invalid arguments") {
				t.Fatalf("%s = %+v", id, r)
			}
		}
	})
	for _, tc := range []struct {
		name  string
		steps []model.Response
	}{
		{"duplicate call IDs", []model.Response{calls(call("c1", "run_js", `{"code":"return 1"}`), call("c1", "run_js", `{"code":"return 2"}`))}},
		{"empty call ID", []model.Response{calls(call("", "run_js", `{"code":"return 1"}`))}},
		{"reused call ID", []model.Response{calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(call("c1", "run_js", `{"code":"return 1"}`))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.steps...)
			_, err := e.Attempt()
			if !errors.Is(err, runtime.ErrModelResponse) {
				t.Fatalf("err = %v, want ErrModelResponse", err)
			}
			for _, m := range e.History() {
				if m.Role == model.RoleAssistant && len(m.ToolCalls()) > 0 && m.ToolCalls()[0].ID == "c1" && len(tc.steps) == 1 {
					t.Fatal("the unusable response was committed")
				}
			}
		})
	}
	t.Run("call ID already in the session's window", func(t *testing.T) {
		e := newEnv(t, calls(completeOutput("c1", "x")))
		e.Complete()
		e.Run, e.Message, e.IDs = "r2", "And now?", runtimetest.FixedID("run2")
		in := e.Input(e.Store())
		in.Model = modelFunc(func(context.Context, model.Request) (*model.Response, error) {
			r := calls(completeOutput("c1", "y"))
			return &r, nil
		})
		if _, err := runtime.Run(context.Background(), in); !errors.Is(err, runtime.ErrModelResponse) {
			t.Fatalf("err = %v, want ErrModelResponse for a call ID the conversation already has", err)
		}
	})
	t.Run("response without tool calls gets a nudge", func(t *testing.T) {
		e := newEnv(t, model.Reply(model.Part{Type: model.PartText, Text: "thinking aloud"}), calls(completeOutput("c1", "x")))
		e.Complete()
		h := e.History()
		if len(h) != 5 || h[2].Role != model.RoleUser || !strings.Contains(h[2].Text(), "called no tool") {
			t.Fatalf("transcript = %s", dump(h))
		}
	})
}

func TestPanicsNeverReachTheCaller(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	in := e.Input(e.Store())
	in.Model = modelFunc(func(ctx context.Context, req model.Request) (*model.Response, error) {
		if e.Model.StepIndex(req.Messages) == 1 {
			panic("provider adapter bug")
		}
		return e.Model.Generate(ctx, req)
	})
	res, err := runtime.Run(context.Background(), in)
	if res != nil || !errors.Is(err, runtime.ErrPanic) {
		t.Fatalf("= %+v, %v", res, err)
	}
	if e.Execs.Open() != 0 {
		t.Fatal("the executor was not closed after a panic (C41)")
	}
	e.Complete()
}

// A closed Drain stops the attempt between commits; the next attempt
// resumes there and nothing was interrupted.
func TestDrainStopsAtACommitBoundary(t *testing.T) {
	e := newEnv(t, calls(call("c1", "run_js", `{"code":"return 1"}`), call("c2", "run_js", `{"code":"return 2"}`)), calls(completeOutput("c3", "x")))
	drain := make(chan struct{})
	in := e.Input(e.Store())
	in.Drain = drain
	in.Sink = runtime.SinkFunc(func(_ context.Context, ev runtime.SinkEvent) {
		if ev.Kind == runtime.SinkToolResult && ev.CallID == "c1" {
			close(drain)
		}
	})
	if _, err := runtime.Run(context.Background(), in); !errors.Is(err, runtime.ErrDrained) {
		t.Fatalf("err = %v, want ErrDrained", err)
	}
	e.Complete()
	if r := toolResult(e.History(), "c2"); r == nil || r.IsError {
		t.Fatalf("c2 = %+v: a drained attempt must leave nothing interrupted", r)
	}
	if e.Execs.Executed("c1") != 1 || e.Execs.Executed("c2") != 1 {
		t.Fatal("a call ran twice or not at all")
	}
}

// C34: the usage a provider reports travels with the response's commit
// (readable from the log by usage read models and replay), on that commit
// only: a later commit carrying it again would count it twice.
func TestC34_ResponseUsageIsCommittedWithItsResponseOnly(t *testing.T) {
	first := calls(call("c1", "run_js", `{"code":"return 1"}`))
	first.Usage = model.Usage{InputTokens: 120, OutputTokens: 7}
	last := calls(completeOutput("c2", "x"))
	last.Usage = model.Usage{InputTokens: 150, OutputTokens: 9, ReasoningTokens: 3}
	e := newEnv(t, first, last)
	var rs *recStore
	res, err := recAttempt(e, &rs)
	mustComplete(t, res, err)
	var got []model.Usage
	for _, cp := range rs.saved {
		response := len(cp.Append) > 0 && cp.Append[0].Role == model.RoleAssistant
		switch {
		case response && cp.Usage == nil:
			t.Fatalf("rev %d commits a response without its usage", cp.Revision)
		case !response && cp.Usage != nil:
			t.Fatalf("rev %d carries usage %+v but commits no response", cp.Revision, *cp.Usage)
		case response:
			got = append(got, *cp.Usage)
		}
	}
	if want := []model.Usage{first.Usage, last.Usage}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("committed usage %v, want %v", got, want)
	}
}
