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

// fakeIndex is a run index of the given entries.
type fakeIndex map[string]runindex.Entry

func (f fakeIndex) Get(runID string) (runindex.Entry, bool) {
	e, ok := f[runID]
	return e, ok
}

// A kept run whose root's session was purged (the root's agent keeps less
// long) has no usage left, and a purged child keeps its agent from the
// index. Before, the view failed (500): the root's ledger entry was gone.
func TestRunDetailsOfAPurgedRoot(t *testing.T) {
	e := runindex.Entry{RunID: "r2", SessionID: "s2", RootRunID: "r1"}
	ix := fakeIndex{"r1": {RunID: "r1", Status: runtime.StatusPurged}, "r2": {RunID: "r2", Agent: "worker"}}
	kids, usage, err := runDetails(context.Background(), fakeRuns{fail: "usage"}, ix, e)
	if err != nil || usage != nil || len(kids) != 1 {
		t.Fatalf("runDetails = %v, %v, %v; want no usage, no error", kids, usage, err)
	}
	purgedKid := fakePurgedChild{}
	kids, _, err = runDetails(context.Background(), purgedKid, ix, runindex.Entry{RunID: "r0", RootRunID: "r0"})
	if err != nil || len(kids) != 1 || kids[0]["agent"] != "worker" {
		t.Fatalf("a purged child: %v, %v; want its agent from the index", kids, err)
	}
}

// fakePurgedChild has one child whose record went with its session.
type fakePurgedChild struct{ fakeRuns }

func (fakePurgedChild) Children(context.Context, string) ([]events.Run, error) {
	return []events.Run{{SessionID: "s2", RunID: "r2", ParentCallID: "c1"}}, nil
}

// A run's view fails when any of its reads fails; before, a failed usage,
// children or child status read showed as zero usage, no children or an
// empty status, with a 200.
func TestRunDetailsFailWithTheirReads(t *testing.T) {
	e := runindex.Entry{RunID: "r1", SessionID: "s1", RootRunID: "r1"}
	kids, usage, err := runDetails(context.Background(), fakeRuns{}, fakeIndex{}, e)
	if err != nil || len(kids) != 1 || kids[0]["status"] != runtime.StatusCompleted || usage["steps"] != 7 {
		t.Fatalf("all reads answer: %v %v %v", kids, usage, err)
	}
	for _, fail := range []string{"usage", "children", "status"} {
		if _, _, err := runDetails(context.Background(), fakeRuns{fail: fail}, fakeIndex{}, e); !errors.Is(err, errOut) {
			t.Errorf("the %s read fails: %v; want its error", fail, err)
		}
	}
}
