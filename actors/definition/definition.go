// Package definition is what a run is admitted under, as a value: the
// agent's definition as the gate checked it, its model limits, budget and
// model, the definitions of every agent it may spawn (and they in turn),
// and the capability catalog they were granted. A Version is stored once
// in the log's replicated storage under its content address (ID), and a
// run's record names it (events.Run.Definition): whichever member resumes
// the run, whatever agent files it has now, resumes it under the same
// definitions, so every checkpoint's contract hash matches (C9), and a
// child is spawned under the definition pinned with its parent.
//
// A version is the closure of one agent: every agent it may spawn,
// transitively, is in it, so that agents spawning each other (a cycle)
// still have a content address, and a pinned parent's children need no
// address of their own: a child's record names its parent's version and
// its own slug in it.
//
// The package is pure: building, encoding and checking versions. The
// node (actors) stores and loads them.
package definition

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-agents/cairn/runtime"
)

// Agent is an agent as a deployment defines it: its definition, the
// limits of its model, the budget of its root runs, and its model.
type Agent struct {
	Definition runtime.AgentDefinition `json:"definition"`
	Limits     runtime.ModelLimits     `json:"limits"`
	Budget     runtime.Budget          `json:"budget"`
	// Model names the agent's model as its deployment resolved it
	// ("openai:gpt-4o", "scripted:researcher.script.yaml"); "" when the
	// host builds models by slug alone. ModelConfig is what else the host
	// builds the model from (a retry policy), opaque here. Both are
	// pinned: a run keeps its model across a deploy that changes it.
	Model       string          `json:"model,omitempty"`
	ModelConfig json.RawMessage `json:"model_config,omitempty"`
}

// Version is the closure of one agent (Root) as a deployment defined it.
type Version struct {
	// Root is the slug of the agent the version was made for.
	Root string `json:"root"`
	// Agents are Root and every agent it may spawn, transitively, by
	// slug.
	Agents map[string]Agent `json:"agents"`
	// Capabilities are the catalog entries the agents were granted, by
	// name: those their definitions name, and no other.
	Capabilities map[string]runtime.Capability `json:"capabilities,omitempty"`
}

// Errors of this package.
var (
	// ErrIncomplete: a deployment lacks an agent or a capability a
	// definition names.
	ErrIncomplete = errors.New("definition: incomplete deployment")
	// ErrMismatch: stored bytes do not hash to the address they were
	// stored under (corruption, or a wrong key).
	ErrMismatch = errors.New("definition: content does not match its address")
)

// Pin makes the version of the agent root of a deployment: agents by slug,
// catalog by capability name. It fails with ErrIncomplete, naming what is
// missing, when root, a subagent or a capability is absent.
func Pin(root string, agents map[string]Agent, catalog map[string]runtime.Capability) (Version, error) {
	v := Version{Root: root, Agents: map[string]Agent{}}
	todo := []string{root}
	for len(todo) > 0 {
		slug := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, done := v.Agents[slug]; done {
			continue
		}
		a, ok := agents[slug]
		if !ok {
			return Version{}, fmt.Errorf("%w: agent %q is not deployed", ErrIncomplete, slug)
		}
		v.Agents[slug] = a
		for _, c := range a.Definition.Capabilities {
			cp, ok := catalog[c]
			if !ok {
				return Version{}, fmt.Errorf("%w: agent %q: capability %q is not in the catalog", ErrIncomplete, slug, c)
			}
			if v.Capabilities == nil {
				v.Capabilities = map[string]runtime.Capability{}
			}
			v.Capabilities[c] = cp
		}
		todo = append(todo, a.Definition.Subagents...)
	}
	return v, nil
}

// Sub is the version of agent slug of v's closure: the closure from slug,
// as v pinned it. A child is created under its parent's version's Sub, so
// that every run names a version rooted at its own agent, equal to that
// agent's current one when nothing it may reach has changed since. It
// fails with ErrIncomplete when v does not hold slug.
func (v Version) Sub(slug string) (Version, error) {
	if slug == v.Root {
		return v, nil
	}
	return Pin(slug, v.Agents, v.Capabilities)
}

// Encode is v's canonical form: JSON with map keys sorted and embedded
// JSON (schemas, options) compacted, so that equal versions encode to equal
// bytes.
func Encode(v Version) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("definition: encode %s: %w", v.Root, err)
	}
	return b, nil
}

// IDOf is the content address of an encoded version: its SHA-256, hex.
func IDOf(encoded []byte) string {
	sum := sha256.Sum256(encoded)
	return hex.EncodeToString(sum[:])
}

// ID is v's content address.
func ID(v Version) (string, error) {
	b, err := Encode(v)
	if err != nil {
		return "", err
	}
	return IDOf(b), nil
}

// Short is the first 12 hex digits of an ID, as views print it.
func Short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ValidID reports whether id has the form of a content address (64
// lowercase hex digits), naming what is wrong.
func ValidID(id string) error {
	if len(id) != 2*sha256.Size {
		return fmt.Errorf("definition version %q: want %d hex digits", id, 2*sha256.Size)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("definition version %q: want lowercase hex digits", id)
		}
	}
	return nil
}

// Decode reads a version stored under id and checks that it is the one
// id addresses (ErrMismatch otherwise).
func Decode(id string, b []byte) (Version, error) {
	if IDOf(b) != id {
		return Version{}, fmt.Errorf("%w: version %s", ErrMismatch, Short(id))
	}
	var v Version
	if err := json.Unmarshal(b, &v); err != nil {
		return Version{}, fmt.Errorf("definition: version %s: %w", Short(id), err)
	}
	if _, ok := v.Agents[v.Root]; !ok {
		return Version{}, fmt.Errorf("definition: version %s: its root %q is not among its agents", Short(id), v.Root)
	}
	return v, nil
}

// Run is what a run of agent slug under v is given: its agent, the
// definitions of the agents it may spawn, and its capabilities, in its
// definition's order. It fails with ErrIncomplete when v does not hold
// them (a version of another agent's closure).
func (v Version) Run(slug string) (Agent, []runtime.AgentDefinition, []runtime.Capability, error) {
	a, ok := v.Agents[slug]
	if !ok {
		return Agent{}, nil, nil, fmt.Errorf("%w: agent %q is not in version %s's closure", ErrIncomplete, slug, v.Root)
	}
	subs := make([]runtime.AgentDefinition, 0, len(a.Definition.Subagents))
	for _, s := range a.Definition.Subagents {
		sub, ok := v.Agents[s]
		if !ok {
			return Agent{}, nil, nil, fmt.Errorf("%w: subagent %q of %q", ErrIncomplete, s, slug)
		}
		subs = append(subs, sub.Definition)
	}
	caps := make([]runtime.Capability, 0, len(a.Definition.Capabilities))
	for _, c := range a.Definition.Capabilities {
		cp, ok := v.Capabilities[c]
		if !ok {
			return Agent{}, nil, nil, fmt.Errorf("%w: capability %q of %q", ErrIncomplete, c, slug)
		}
		caps = append(caps, cp)
	}
	return a, subs, caps, nil
}

// Digest is the content address of one agent of a version alone (its
// definition, limits, budget and model, not its children's): what views
// show as the agent's version, equal across every closure that holds
// the agent unchanged.
func (v Version) Digest(slug string) string {
	a, ok := v.Agents[slug]
	if !ok {
		return ""
	}
	b, err := json.Marshal(a)
	if err != nil {
		return ""
	}
	return IDOf(b)
}

// Slugs are the version's agents, sorted.
func (v Version) Slugs() []string {
	out := make([]string, 0, len(v.Agents))
	for s := range v.Agents {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
