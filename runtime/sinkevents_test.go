package runtime_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/memory"
	"github.com/cairn-agents/cairn/store/storetest"
)

// recordingOpener keeps a copy of every checkpoint its stores commit.
type recordingOpener struct {
	inner   storetest.Opener
	commits []*runtime.Checkpoint
}

func (o *recordingOpener) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	s, err := o.inner.Open(ctx, sessionID, runID)
	if err != nil {
		return nil, err
	}
	return &recordingStore{Store: s, o: o}, nil
}

type recordingStore struct {
	runtime.Store
	o *recordingOpener
}

func (s *recordingStore) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if err := s.Store.SaveCheckpoint(ctx, cp); err != nil {
		return err
	}
	b, _ := json.Marshal(cp)
	var c runtime.Checkpoint
	_ = json.Unmarshal(b, &c)
	s.o.commits = append(s.o.commits, &c)
	return nil
}

// SinkEventsOf reads back from the commits what the sink was told, event
// for event (but the parks, which are no commits), in every scenario of the
// crash matrix driven to its end.
func TestSinkEventsOfIsWhatTheSinkSaw(t *testing.T) {
	for _, sc := range runtimetest.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			rec := &recordingOpener{inner: memory.New()}
			h := runtimetest.NewHost(t, rec, sc.Steps...)
			h.Ctrl.Steps = sc.Budget
			if sc.Setup != nil {
				sc.Setup(h)
			}
			if _, err := h.Drive(20, nil); err != nil {
				t.Fatal(err)
			}
			var want, got []runtime.SinkEvent
			for _, ev := range h.Sink.Events() {
				if ev.Kind != runtime.SinkWaiting {
					ev.Offered = false // the loop's knowledge, not the commit's
					want = append(want, ev)
				}
			}
			for _, cp := range rec.commits {
				for _, ev := range runtime.SinkEventsOf(cp) {
					ev.Text, ev.Tool = h.Redact.Redact(ev.Text), h.Redact.Redact(ev.Tool)
					got = append(got, ev)
				}
			}
			if len(want) == 0 {
				t.Fatal("the sink saw nothing")
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("from the commits:\n%+v\nthe sink saw:\n%+v", got, want)
			}
		})
	}
}

// TestSinkToolCallNamesAreRedactedAndMarked (issue 49): a tool call's name
// is the model's choice, so it reaches the sink and the next model request
// redacted like its text (an unknown tool named after a secret printed it
// on `node run`'s progress and in /metrics, and sent it to the model);
// Offered tells the calls of the run's own tools from the
// rest, so that a host can count them by name without counting the model's
// inventions.
func TestSinkToolCallNamesAreRedactedAndMarked(t *testing.T) {
	const secret = "sk-live-4f9c2a7e1b8d6053"
	e := newEnv(t, calls(call("c1", "leak_"+secret, `{}`), call("c2", "run_js", `{"code":"return 1"}`)), calls(completeOutput("c3", "done")))
	e.Redact = runtime.Secrets{secret}
	e.Complete()
	offered := map[string]bool{}
	for _, ev := range e.Sink.Events() {
		if ev.Kind != runtime.SinkToolCall {
			continue
		}
		if strings.Contains(ev.Tool, secret) {
			t.Errorf("the sink was told the tool %q", ev.Tool)
		}
		offered[ev.Tool] = ev.Offered
	}
	want := map[string]bool{"leak_[REDACTED]": false, "run_js": true, "complete": true}
	if !reflect.DeepEqual(offered, want) {
		t.Fatalf("tool calls seen (name: offered) = %v, want %v", offered, want)
	}
	// The model is sent the name back with the call: redacted too (it
	// was not: the planted-secret suite found it in the next request).
	for i, req := range e.Model.Requests() {
		if b, _ := json.Marshal(req); strings.Contains(string(b), secret) {
			t.Errorf("model request %d carries the secret: %s", i, b)
		}
	}
}
