package api

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/runtime"
)

// fakeRuns answers a run view's reads, failing the one named by fail.
type fakeRuns struct{ fail string }

var errOut = errors.New("nats: connection closed")

func (f fakeRuns) Status(_ context.Context, _, runID string) (runtime.CallStatus, *runtime.Reply, string, error) {
	if f.fail == "status" {
		return "", nil, "", errOut
	}
	return runtime.StatusCompleted, nil, "", nil
}

func (f fakeRuns) Usage(context.Context, string) (int, int64, int64, error) {
	if f.fail == "usage" {
		return 0, 0, 0, errOut
	}
	return 7, 100, 20, nil
}

func (f fakeRuns) Children(context.Context, string) ([]events.Run, error) {
	if f.fail == "children" {
		return nil, errOut
	}
	return []events.Run{{SessionID: "s2", RunID: "r2", Agent: "worker", ParentCallID: "c1"}}, nil
}

// A run's view fails when any of its reads fails; before, a failed usage,
// children or child status read showed as zero usage, no children or an
// empty status, with a 200.
func TestRunDetailsFailWithTheirReads(t *testing.T) {
	e := runindex.Entry{RunID: "r1", SessionID: "s1", RootRunID: "r1"}
	kids, usage, err := runDetails(context.Background(), fakeRuns{}, e)
	if err != nil || len(kids) != 1 || kids[0]["status"] != runtime.StatusCompleted || usage["steps"] != 7 {
		t.Fatalf("all reads answer: %v %v %v", kids, usage, err)
	}
	for _, fail := range []string{"usage", "children", "status"} {
		if _, _, err := runDetails(context.Background(), fakeRuns{fail: fail}, e); !errors.Is(err, errOut) {
			t.Errorf("the %s read fails: %v; want its error", fail, err)
		}
	}
}
