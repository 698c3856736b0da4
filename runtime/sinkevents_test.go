package runtime_test

import (
	"context"
	"encoding/json"
	"reflect"
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
					want = append(want, ev)
				}
			}
			for _, cp := range rec.commits {
				for _, ev := range runtime.SinkEventsOf(cp) {
					ev.Text = h.Redact.Redact(ev.Text)
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
