package replay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"

	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
)

// A continuation (a second run in a completed run's session) starts from
// the session's window: its re-drive serves that window and reproduces it,
// and a fork of it carries the window into the new session, so resumed
// with the same model it makes the same commits.
func TestContinuationRedriveAndFork(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	sc := runtimetest.Scenarios()[0]
	h1, session := env.host(t, sc)
	if _, err := h1.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	steps := []model.Response{runtimetest.Calls(runtimetest.Call("x1", "run_js", `{"code":"return 7"}`)), runtimetest.Calls(runtimetest.CompleteOutput("x2", "again"))}
	h2 := runtimetest.NewHost(t, scoped{s: env.s, prefix: session[:len(session)-len(h1.Session)]}, steps...)
	h2.Run, h2.IDs, h2.Message = "r2", runtimetest.FixedID("run2"), "And again?"
	if _, err := h2.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	hist, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, session, "r2")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := hist.At(1); err != nil || len(st.Window) <= 1 {
		t.Fatalf("the continuation's window at revision 1 lacks the session's history: %v", err)
	}
	rep, err := replay.Redrive(ctx, hist, 0, setup(h2))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() {
		t.Fatalf("continuation re-drove %d/%d; divergence %+v", rep.Reproduced, rep.Logged, rep.Divergence)
	}
	rec, err := replay.Fork(ctx, env.s, hist, replay.ForkOptions{SessionID: "fork-cont", RunID: "fc", At: 1})
	if err != nil {
		t.Fatal(err)
	}
	fh := runtimetest.NewHost(t, env.s, steps...)
	fh.Session, fh.Run, fh.IDs = rec.SessionID, rec.RunID, runtimetest.FixedID("run2")
	if _, err := fh.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	fork, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, rec.SessionID, rec.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if d := replay.DiffRuns(hist, fork); len(d) != 0 {
		t.Fatalf("the fork of a continuation differs: %+v", d)
	}
	// The fork's window is the original's, message for message.
	a, _ := hist.At(0)
	b, _ := fork.At(0)
	if fmt.Sprint(ids(a.Window)) != fmt.Sprint(ids(b.Window)) {
		t.Fatalf("windows differ:\n original %v\n fork     %v", ids(a.Window), ids(b.Window))
	}
}

func ids(ms []model.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
