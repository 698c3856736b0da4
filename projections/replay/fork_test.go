package replay_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
)

// A fork from a model-phase revision, resumed with the same model, makes
// the same commits as the original; with another model it differs only
// after the fork point; the original session is untouched either way.
func TestForkResumesFromRevision(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	h, orig := env.driven(t) // scenario 0: two run_js calls, then complete
	var at int64
	for _, c := range orig.Commits {
		if c.Checkpoint.Phase == runtime.PhaseModel && c.Checkpoint.Step > 0 {
			at = c.Checkpoint.Revision
		}
	}
	if at == 0 {
		t.Fatal("no model-phase revision after a step")
	}
	before := len(orig.Events)

	for _, tc := range []struct {
		name  string
		run   string
		steps []model.Response
		same  bool
	}{
		{name: "same model", run: "f1", steps: runtimetest.Scenarios()[0].Steps, same: true},
		{name: "other model", run: "f2", steps: []model.Response{runtimetest.Scenarios()[0].Steps[0], runtimetest.Calls(runtimetest.CompleteOutput("c9", "other"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := replay.Fork(ctx, env.s, orig, replay.ForkOptions{SessionID: "fork-" + tc.run, RunID: tc.run, At: at})
			if err != nil {
				t.Fatal(err)
			}
			if rec.ForkedFrom != h.Run || rec.ForkedAt != at {
				t.Fatalf("fork record = %+v", rec)
			}
			fh := runtimetest.NewHost(t, env.s, tc.steps...)
			fh.Session, fh.Run = "fork-"+tc.run, tc.run
			if _, err := fh.Drive(10, nil); err != nil {
				t.Fatal(err)
			}
			fork, err := replay.Load(ctx, replay.Source{JS: env.js}, tc.run)
			if err != nil {
				t.Fatal(err)
			}
			if fork.Run.ForkedFrom != h.Run {
				t.Fatalf("loaded fork record = %+v", fork.Run)
			}
			changes := replay.DiffRuns(orig, fork)
			if tc.same && len(changes) != 0 {
				var b bytes.Buffer
				replay.PrintChanges(&b, changes)
				t.Fatalf("fork with the same model differs:\n%s", b.String())
			}
			if !tc.same {
				if len(changes) == 0 {
					t.Fatal("fork with another model is identical")
				}
				for _, c := range changes {
					if c.Revision <= at {
						t.Fatalf("a change at or before the fork point: %+v", c)
					}
				}
			}
			again, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, orig.SessionID, h.Run)
			if err != nil {
				t.Fatal(err)
			}
			if len(again.Events) != before {
				t.Fatalf("the original session has %d events, had %d", len(again.Events), before)
			}
		})
	}
	// Bad options name the field.
	for _, o := range []replay.ForkOptions{
		{SessionID: orig.SessionID, RunID: "x", At: at},
		{SessionID: "fork-x", RunID: "x", At: 999},
		{SessionID: "bad session", RunID: "x", At: at},
		{SessionID: "fork-f1", RunID: "y", At: at},  // session exists
		{SessionID: "fork-f1", RunID: "f1", At: at}, // run exists
	} {
		if _, err := replay.Fork(ctx, env.s, orig, o); !errors.Is(err, replay.ErrForkInput) {
			t.Errorf("Fork(%+v) = %v, want ErrForkInput", o, err)
		}
	}
}

// Two revisions of a run differ in the checkpoint and the transcript; a
// revision does not differ from itself.
func TestDiffStates(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	h, session := env.host(t, runtimetest.Scenarios()[0])
	if _, err := h.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	hist, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, session, h.Run)
	if err != nil {
		t.Fatal(err)
	}
	a, err := hist.At(2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hist.At(0)
	if err != nil {
		t.Fatal(err)
	}
	if d := replay.DiffStates(a, a); len(d) != 0 {
		t.Fatalf("a state differs from itself: %+v", d)
	}
	d := replay.DiffStates(a, b)
	fields := map[string]bool{}
	for _, c := range d {
		fields[c.What] = true
	}
	if !fields["revision"] || !fields["reply"] || !fields["transcript[2]"] {
		t.Fatalf("diff of revision 2 and the last = %+v", d)
	}
	if _, err := hist.At(hist.Last() + 1); !errors.Is(err, replay.ErrNoRevision) {
		t.Fatalf("At(last+1) = %v", err)
	}
	var tl bytes.Buffer
	replay.Print(&tl, hist, 0)
	for _, want := range []string{"task", "model", "result", "completed", "attempt 1"} {
		if !bytes.Contains(tl.Bytes(), []byte(want)) {
			t.Fatalf("timeline lacks %q:\n%s", want, tl.String())
		}
	}
}

// ContractHash is the hash a run of a setup commits; a fork given the hash
// of another definition version resumes under that version.
func TestForkOntoAnotherDefinition(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	h, orig := env.driven(t) // scenario 0: two run_js calls, then complete
	same, err := replay.ContractHash(setup(h))
	if err != nil {
		t.Fatal(err)
	}
	if same != orig.Commits[0].Checkpoint.ContractHash {
		t.Fatalf("ContractHash = %.12s, the run committed %.12s", same, orig.Commits[0].Checkpoint.ContractHash)
	}
	v2 := setup(h)
	v2.Definition.Instructions = "Plan, then answer briefly."
	hash, err := replay.ContractHash(v2)
	if err != nil || hash == same {
		t.Fatalf("ContractHash of another definition = %.12s, %v", hash, err)
	}
	rec, err := replay.Fork(ctx, env.s, orig, replay.ForkOptions{SessionID: "fork-v2", RunID: "v2", At: 1, ContractHash: hash})
	if err != nil {
		t.Fatal(err)
	}
	fh := runtimetest.NewHost(t, env.s, runtimetest.Scenarios()[0].Steps...)
	fh.Session, fh.Run, fh.Def = rec.SessionID, rec.RunID, v2.Definition
	if _, err := fh.Drive(10, nil); err != nil {
		t.Fatalf("the fork did not resume under the new definition: %v", err)
	}
	// A second fork onto v2 refuses to resume under the old definition
	// (C9): the copied checkpoints carry v2's contract.
	rec2, err := replay.Fork(ctx, env.s, orig, replay.ForkOptions{SessionID: "fork-v2b", RunID: "v2b", At: 1, ContractHash: hash})
	if err != nil {
		t.Fatal(err)
	}
	old := runtimetest.NewHost(t, env.s, runtimetest.Scenarios()[0].Steps...)
	old.Session, old.Run = rec2.SessionID, rec2.RunID
	if _, err := old.Attempt(); !errors.Is(err, runtime.ErrContractMismatch) {
		t.Fatalf("resume under the old definition: %v, want ErrContractMismatch", err)
	}
}
