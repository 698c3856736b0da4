package runtime_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// ContractHash is the hash the loop commits in a run's checkpoints, for
// every shape of contract (subagents or none, capabilities or none, a
// defaulted effect, schemas spelled another way), and it refuses what the
// loop refuses: the two cannot drift apart.
func TestContractHashIsTheCommittedOne(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(h *env)
	}{
		{"planner", func(*env) {}},
		{"no subagents or capabilities", func(h *env) {
			h.Def.Subagents, h.Def.Capabilities, h.Subs, h.Caps = nil, nil, nil, nil
		}},
		{"defaulted effect, reordered schema, model options", func(h *env) {
			h.Caps[0].Effect = ""
			h.Def.OutputSchema = json.RawMessage(`{"additionalProperties": false, "properties": {"answer": {"type": "string"}}, "required": ["answer"], "type": "object"}`)
			h.Def.ModelOptions = json.RawMessage(`{"temperature":0}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newEnv(t, calls(completeOutput("c1", "done")))
			tc.setup(h)
			want, err := runtime.ContractHash(h.Def, h.Subs, h.Caps)
			if err != nil {
				t.Fatal(err)
			}
			h.Complete()
			if got := h.Checkpoint().ContractHash; got != want {
				t.Fatalf("ContractHash = %.12s, the run committed %.12s", want, got)
			}
		})
	}
	// Another definition version has another hash.
	h := newEnv(t)
	a, _ := runtime.ContractHash(h.Def, h.Subs, h.Caps)
	h.Def.Instructions += " Briefly."
	if b, err := runtime.ContractHash(h.Def, h.Subs, h.Caps); err != nil || a == b {
		t.Fatalf("changed instructions: hash %.12s, %v; before %.12s", b, err, a)
	}
	// A contract the loop refuses has no hash.
	h = newEnv(t)
	h.Subs = h.Subs[:1]
	_, err := runtime.ContractHash(h.Def, h.Subs, h.Caps)
	if !errors.Is(err, runtime.ErrInvalidInput) {
		t.Fatalf("ContractHash with a subagent missing = %v, want ErrInvalidInput", err)
	}
	if _, rerr := h.Attempt(); !errors.Is(rerr, runtime.ErrInvalidInput) || rerr.Error() != err.Error() {
		t.Fatalf("the loop refused with %v, ContractHash with %v", rerr, err)
	}
}

// Rehash moves a checkpoint to another contract as the next revision and
// commits nothing of its own again (C13, C14).
func TestRehashIsTheNextRevisionUnderAnotherContract(t *testing.T) {
	cp := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "old", Revision: 7, RunKey: "k", Phase: runtime.PhaseModel, Step: 3,
		Calls: []runtime.CallRecord{{ID: "c1", Name: "run_js", State: runtime.CallDone}}, UsedCallIDs: []string{"c1"},
		Append: []model.Message{model.TextMessage("m", model.RoleUser, "hi")}, Usage: &model.Usage{InputTokens: 5},
		ModelFailures: []model.Failure{{}}}
	next := runtime.Rehash(cp, "new")
	if next.Revision != 8 || next.ContractHash != "new" || next.Append != nil || next.Usage != nil || next.ModelFailures != nil {
		t.Fatalf("Rehash = %+v", next)
	}
	if next.Step != 3 || next.RunKey != "k" || next.Phase != runtime.PhaseModel || len(next.Calls) != 1 || len(next.UsedCallIDs) != 1 {
		t.Fatalf("Rehash changed the state: %+v", next)
	}
	next.Calls[0].State = runtime.CallPending
	if cp.Calls[0].State != runtime.CallDone || cp.Revision != 7 || cp.ContractHash != "old" {
		t.Fatal("Rehash changed the checkpoint it was given")
	}
	if next.HasCallsInFlight() != true || cp.HasCallsInFlight() {
		t.Error("HasCallsInFlight")
	}
}
