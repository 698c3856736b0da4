package definition_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/actors/definition"
	"github.com/cairn-agents/cairn/runtime"
)

func agent(slug, instructions string, subs, caps []string) definition.Agent {
	return definition.Agent{
		Definition: runtime.AgentDefinition{Slug: slug, Instructions: instructions, OutputSchema: json.RawMessage(`{"type": "object"}`), Subagents: subs, Capabilities: caps},
		Limits:     runtime.ModelLimits{ContextTokens: 1000, OutputTokens: 100},
		Model:      "openai:gpt-4o",
	}
}

var catalog = map[string]runtime.Capability{
	"kv.get": {Name: "kv.get", InputSchema: json.RawMessage(`{"type":"object"}`), Effect: runtime.EffectReadOnly},
	"kv.put": {Name: "kv.put", InputSchema: json.RawMessage(`{"type":"object"}`)},
	"unused": {Name: "unused", InputSchema: json.RawMessage(`{}`)},
}

func deployment(researcherPrompt string) map[string]definition.Agent {
	return map[string]definition.Agent{
		"researcher": agent("researcher", researcherPrompt, []string{"checker", "summarizer"}, []string{"kv.get"}),
		"checker":    agent("checker", "Check.", []string{"researcher"}, nil), // a cycle
		"summarizer": agent("summarizer", "Sum.", nil, []string{"kv.put"}),
		"other":      agent("other", "Other.", nil, []string{"unused"}),
	}
}

func id(t *testing.T, v definition.Version) string {
	t.Helper()
	s, err := definition.ID(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPinHoldsTheClosureAndItsCapabilitiesOnly(t *testing.T) {
	v, err := definition.Pin("researcher", deployment("Research."), catalog)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(v.Slugs(), ","); got != "checker,researcher,summarizer" {
		t.Errorf("agents %s; want the researcher's closure, the cycle through checker included, not other", got)
	}
	if _, ok := v.Capabilities["unused"]; ok || len(v.Capabilities) != 2 {
		t.Errorf("capabilities %v; want kv.get and kv.put only", v.Capabilities)
	}
	// The checker's version is the same closure from another root: a
	// version of its own, holding the researcher.
	c, err := definition.Pin("checker", deployment("Research."), catalog)
	if err != nil {
		t.Fatal(err)
	}
	if id(t, c) == id(t, v) || len(c.Agents) != 3 {
		t.Errorf("the checker's version: %d agents, same id %v", len(c.Agents), id(t, c) == id(t, v))
	}
}

func TestIDChangesWithWhatARunIsGivenOnly(t *testing.T) {
	base, _ := definition.Pin("researcher", deployment("Research."), catalog)
	again, _ := definition.Pin("researcher", deployment("Research."), catalog)
	if id(t, base) != id(t, again) {
		t.Fatal("the same deployment pinned twice has two ids")
	}
	spaced := deployment("Research.")
	a := spaced["summarizer"]
	a.Definition.OutputSchema = json.RawMessage("{\n  \"type\" :  \"object\"\n}")
	spaced["summarizer"] = a
	if v, _ := definition.Pin("researcher", spaced, catalog); id(t, v) != id(t, base) {
		t.Error("a schema's whitespace changed the id: the encoding is not canonical")
	}
	changes := map[string]func(d map[string]definition.Agent, c map[string]runtime.Capability){
		"the root's prompt": func(d map[string]definition.Agent, _ map[string]runtime.Capability) {
			a := d["researcher"]
			a.Definition.Instructions = "Research harder."
			d["researcher"] = a
		},
		"a child's prompt": func(d map[string]definition.Agent, _ map[string]runtime.Capability) {
			a := d["summarizer"]
			a.Definition.Instructions = "Summarize."
			d["summarizer"] = a
		},
		"a model": func(d map[string]definition.Agent, _ map[string]runtime.Capability) {
			a := d["checker"]
			a.Model = "anthropic:claude"
			d["checker"] = a
		},
		"a granted capability's schema": func(_ map[string]definition.Agent, c map[string]runtime.Capability) {
			k := c["kv.put"]
			k.InputSchema = json.RawMessage(`{"type":"object","required":["key"]}`)
			c["kv.put"] = k
		},
	}
	for name, change := range changes {
		d := deployment("Research.")
		c := map[string]runtime.Capability{}
		for k, v := range catalog {
			c[k] = v
		}
		change(d, c)
		v, err := definition.Pin("researcher", d, c)
		if err != nil {
			t.Fatal(err)
		}
		if id(t, v) == id(t, base) {
			t.Errorf("%s changed, the id did not", name)
		}
	}
	// What the closure does not hold leaves it alone.
	d := deployment("Research.")
	o := d["other"]
	o.Definition.Instructions = "Changed."
	d["other"] = o
	if v, _ := definition.Pin("researcher", d, catalog); id(t, v) != id(t, base) {
		t.Error("an agent outside the closure changed the id")
	}
}

func TestPinRefusesAnIncompleteDeployment(t *testing.T) {
	d := deployment("Research.")
	delete(d, "summarizer")
	if _, err := definition.Pin("researcher", d, catalog); !errors.Is(err, definition.ErrIncomplete) || !strings.Contains(err.Error(), `"summarizer"`) {
		t.Errorf("a missing subagent: %v", err)
	}
	if _, err := definition.Pin("researcher", deployment("R."), map[string]runtime.Capability{}); !errors.Is(err, definition.ErrIncomplete) || !strings.Contains(err.Error(), `"kv.get"`) {
		t.Errorf("a missing capability: %v", err)
	}
}

func TestDecodeChecksTheAddress(t *testing.T) {
	v, _ := definition.Pin("researcher", deployment("Research."), catalog)
	b, err := definition.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := definition.Decode(definition.IDOf(b), b)
	if err != nil {
		t.Fatal(err)
	}
	if id(t, got) != definition.IDOf(b) {
		t.Error("a decoded version encodes to other bytes")
	}
	tampered := []byte(strings.Replace(string(b), "Research.", "Leak it.", 1))
	if _, err := definition.Decode(definition.IDOf(b), tampered); !errors.Is(err, definition.ErrMismatch) {
		t.Errorf("tampered content: %v; want ErrMismatch", err)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("G", 64), strings.Repeat("A", 64)} {
		if definition.ValidID(bad) == nil {
			t.Errorf("ValidID(%q) accepted it", bad)
		}
	}
	if err := definition.ValidID(definition.IDOf(b)); err != nil {
		t.Error(err)
	}
}

func TestRunGivesTheAgentsPiecesInItsOrder(t *testing.T) {
	v, _ := definition.Pin("researcher", deployment("Research."), catalog)
	a, subs, caps, err := v.Run("researcher")
	if err != nil {
		t.Fatal(err)
	}
	if a.Definition.Instructions != "Research." || len(subs) != 2 || subs[0].Slug != "checker" || subs[1].Slug != "summarizer" || len(caps) != 1 || caps[0].Name != "kv.get" {
		t.Errorf("Run = %+v, %v, %v", a.Definition, subs, caps)
	}
	if _, _, _, err := v.Run("other"); !errors.Is(err, definition.ErrIncomplete) {
		t.Errorf("an agent outside the closure: %v", err)
	}
	if v.Digest("checker") == "" || v.Digest("checker") == v.Digest("summarizer") {
		t.Error("digests of two agents are empty or equal")
	}
}

func TestSubIsTheChildsOwnVersion(t *testing.T) {
	v, _ := definition.Pin("researcher", deployment("Research."), catalog)
	sub, err := v.Sub("summarizer")
	if err != nil {
		t.Fatal(err)
	}
	own, _ := definition.Pin("summarizer", deployment("Research."), catalog)
	if id(t, sub) != id(t, own) {
		t.Error("a child's version in its parent's closure differs from the child's own, with nothing changed")
	}
	// The root's prompt edited: the child's version stays.
	if edited, _ := definition.Pin("summarizer", deployment("Research harder."), catalog); id(t, edited) != id(t, sub) {
		t.Error("an edit the child cannot reach changed the child's version")
	}
	// Through the cycle, the checker's closure holds the researcher.
	c, err := v.Sub("checker")
	if err != nil || len(c.Agents) != 3 {
		t.Errorf("Sub(checker) = %d agents, %v", len(c.Agents), err)
	}
	if _, err := v.Sub("other"); !errors.Is(err, definition.ErrIncomplete) {
		t.Errorf("Sub of an agent outside the closure: %v", err)
	}
}
