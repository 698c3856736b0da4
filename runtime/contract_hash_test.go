package runtime_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
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
