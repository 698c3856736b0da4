package runtime_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/memory"
)

// flaky reports failed attempts to the request's trace, as an adapter's
// retry loop does, before it answers: fail[i] for request i.
type flaky struct {
	m     model.Model
	fails [][]model.Failure
	final []error // final[i], when set, is request i's error instead of an answer
	n     int
}

func (f *flaky) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	i := f.n
	f.n++
	if i < len(f.fails) {
		for _, fl := range f.fails[i] {
			model.ReportFailure(ctx, fl)
		}
	}
	if i < len(f.final) && f.final[i] != nil {
		return nil, f.final[i]
	}
	return f.m.Generate(ctx, req)
}

func failure(attempt, status int, retry bool, msg string) model.Failure {
	f := model.Failure{Provider: "openai", Model: "gpt-test", Attempt: attempt, Status: status, Class: model.FailureStatus,
		Error: msg, Retry: retry, At: time.Unix(100, 0).UTC()}
	if retry {
		f.RetryIn = 1500 * time.Millisecond
	}
	return f
}

// The failed requests a step cost are shown on the sink as they happen,
// redacted, and committed with the response they delayed (and with no
// other revision); a step that fails for good says in its error what each
// request before the last met.
func TestModelFailuresAreShownAndCommitted(t *testing.T) {
	rec := &recordingOpener{inner: memory.New()}
	e := runtimetest.NewHost(t, rec, calls(call("c1", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c2", "x")))
	fails := []model.Failure{failure(1, 503, true, "overloaded near s3cr3t"), failure(2, 429, true, "slow down")}
	in := e.Input(e.Store())
	in.Model = &flaky{m: e.Model, fails: [][]model.Failure{fails}}
	mustRun(t, in)

	var shown []runtime.SinkEvent
	for _, ev := range e.Sink.Events() {
		if ev.Kind == runtime.SinkModelFailure {
			shown = append(shown, ev)
		}
	}
	if len(shown) != 2 || shown[0].Failure == nil || shown[0].Failure.Status != 503 || shown[1].Failure.Status != 429 {
		t.Fatalf("sink model failures = %+v, want the 503 and the 429", shown)
	}
	if want := "openai gpt-test request 1 failed (HTTP 503): overloaded near [REDACTED]; retrying in 1.5s"; shown[0].Text != want {
		t.Fatalf("sink line = %q, want %q", shown[0].Text, want)
	}
	if strings.Contains(shown[0].Failure.Error, "s3cr3t") {
		t.Fatalf("the failure on the sink leaks the secret: %q", shown[0].Failure.Error)
	}

	var with []*runtime.Checkpoint
	for _, cp := range rec.commits {
		if len(cp.ModelFailures) > 0 {
			with = append(with, cp)
		}
	}
	if len(with) != 1 || with[0].Step != 1 || len(with[0].Append) == 0 || with[0].Append[0].Role != model.RoleAssistant {
		t.Fatalf("commits with model failures: %d (%+v); want the first response commit alone", len(with), with)
	}
	got := with[0].ModelFailures
	if len(got) != 2 || got[0].Error != "overloaded near [REDACTED]" || got[1].Status != 429 || !got[1].At.Equal(fails[1].At) {
		t.Fatalf("committed failures = %+v, want the two, redacted", got)
	}
	// Read back from the commit, the lines are the ones shown live.
	var again []runtime.SinkEvent
	for _, ev := range runtime.SinkEventsOf(with[0]) {
		if ev.Kind == runtime.SinkModelFailure {
			again = append(again, ev)
		}
	}
	if !reflect.DeepEqual(again, shown) {
		t.Fatalf("SinkEventsOf gives %+v, the sink saw %+v", again, shown)
	}
}

// A step whose retries ran out fails with an error that names the
// requests before the last.
func TestModelStepThatFailsNamesEveryRequest(t *testing.T) {
	e := newEnv(t, calls(completeOutput("c1", "x")))
	last := model.Permanent(errors.New("openai: gave up after 3 attempts: HTTP 503"))
	in := e.Input(e.Store())
	conn := failure(2, 0, true, "b")
	conn.Class = model.FailureConnection
	in.Model = &flaky{m: e.Model, fails: [][]model.Failure{{failure(1, 503, true, "a"), conn, failure(3, 503, false, "c")}},
		final: []error{last}}
	_, err := runtime.Run(context.Background(), in)
	if !errors.Is(err, model.ErrPermanent) {
		t.Fatalf("err = %v, want the model's permanent error", err)
	}
	if want := "(3 requests; before the last: HTTP 503, connection)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to say %q", err, want)
	}
}

// The error of a step that failed is what the run's end records: the
// provider's text in it is redacted (it may quote the request), and it
// still matches what it wraps.
func TestModelStepErrorIsRedacted(t *testing.T) {
	e := newEnv(t, calls(completeOutput("c1", "x")))
	in := e.Input(e.Store())
	in.Model = &flaky{m: e.Model, final: []error{model.Permanent(errors.New("openai: HTTP 400: bad request near s3cr3t"))}}
	_, err := runtime.Run(context.Background(), in)
	if !errors.Is(err, model.ErrPermanent) || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "near [REDACTED]") {
		t.Fatalf("err = %v: want it permanent, redacted", err)
	}
}

// A step abandoned while it backed off (its run stopped) names every
// failed request: none of them is its error.
func TestModelStepAbandonedNamesEveryFailure(t *testing.T) {
	e := newEnv(t, calls(completeOutput("c1", "x")))
	in := e.Input(e.Store())
	in.Model = &flaky{m: e.Model, fails: [][]model.Failure{{failure(1, 503, true, "a"), failure(2, 429, true, "b")}},
		final: []error{context.Canceled}}
	_, err := runtime.Run(context.Background(), in)
	if want := "(2 failed requests: HTTP 503, HTTP 429)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to say %q", err, want)
	}
}
