package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/kvcap"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/retention"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/schema"
)

// agentFile is an agent definition as a user writes it (YAML or JSON).
type agentFile struct {
	Slug         string          `json:"slug"`
	Description  string          `json:"description"`
	Instructions string          `json:"instructions"`
	Model        string          `json:"model"`
	Limits       limitsFile      `json:"limits"`
	Budget       budgetFile      `json:"budget"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema"`
	Subagents    []string        `json:"subagents"`
	Capabilities []string        `json:"capabilities"`
	ModelOptions json.RawMessage `json:"model_options"`
	Retry        retryFile       `json:"retry"`
	// Retention overrides the node's --retention for this agent's
	// sessions: "30d", "12h", or "forever" (docs/operations.md, Retention).
	Retention string `json:"retention"`
}

// retryFile is an agent's retry policy for its model requests: the only
// retries a step's request gets (the provider SDKs' own are off, and a
// step whose policy is spent fails its run rather than being tried again).
type retryFile struct {
	// Attempts is the most requests one model step sends, the first
	// included: 1 never retries. Zero means 4.
	Attempts int `json:"attempts"`
	// Backoff is the first wait when the provider names none (Retry-After
	// is honoured exactly); each retry doubles it up to MaxBackoff.
	Backoff    string `json:"backoff"`
	MaxBackoff string `json:"max_backoff"`
	// MaxWait bounds the waiting of one step in all; a Retry-After beyond
	// what is left gives up at once.
	MaxWait string `json:"max_wait"`
}

// retryPolicy is a retryFile checked and parsed.
type retryPolicy struct {
	attempts                     int
	backoff, maxBackoff, maxWait time.Duration
}

// maxAttempts bounds retry.attempts: past it a policy is a mistake.
const maxAttempts = 20

// The adapters' defaults a policy that leaves them out gets.
const (
	defaultMaxBackoff = 30 * time.Second
	defaultMaxWait    = 2 * time.Minute
)

func (r retryFile) policy() (retryPolicy, *fileError) {
	bad := func(field, format string, args ...any) (retryPolicy, *fileError) {
		return retryPolicy{}, &fileError{Field: "retry." + field, Reason: fmt.Sprintf(format, args...)}
	}
	p := retryPolicy{attempts: r.Attempts}
	switch {
	case r.Attempts == 0:
		p.attempts = 4
	case r.Attempts < 0 || r.Attempts > maxAttempts:
		return bad("attempts", "%d: want 1 to %d requests per step (1 never retries)", r.Attempts, maxAttempts)
	}
	for _, d := range []struct {
		field, v string
		into     *time.Duration
	}{{"backoff", r.Backoff, &p.backoff}, {"max_backoff", r.MaxBackoff, &p.maxBackoff}, {"max_wait", r.MaxWait, &p.maxWait}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v <= 0 {
			return bad(d.field, "%q is not a positive duration like 500ms or 2m", d.v)
		}
		*d.into = v
	}
	if p.backoff > 0 && p.maxBackoff > 0 && p.backoff > p.maxBackoff {
		return bad("backoff", "%s is more than max_backoff %s", p.backoff, p.maxBackoff)
	}
	if p.backoff > defaultMaxBackoff && p.maxBackoff == 0 {
		p.maxBackoff = p.backoff // not capped below itself by the default
	}
	wait := p.maxWait
	if wait == 0 {
		wait = defaultMaxWait
	}
	if p.backoff > wait {
		return bad("backoff", "%s is more than max_wait %s: no retry would ever be made", p.backoff, wait)
	}
	return p, nil
}

type limitsFile struct {
	ContextTokens int `json:"context_tokens"`
	OutputTokens  int `json:"output_tokens"`
}

type budgetFile struct {
	Steps   int    `json:"steps"`
	Tokens  int64  `json:"tokens"`
	Timeout string `json:"timeout"`
}

// deployment is every agent of a directory, validated.
type deployment struct {
	dir    string
	agents map[string]*deployed
	// refused are the files a serving node's gate refused
	// (loadDeploymentServing), each naming its file and field; their
	// agents are not deployed.
	refused []*fileError
}

type deployed struct {
	file  string
	spec  agentFile
	retry retryPolicy
	agent actors.Agent
	// retention is the agent's own (spec.Retention); set only when the
	// definition gives one, else the node's applies.
	retention    time.Duration
	hasRetention bool
}

// fileError names the file and the field at fault.
type fileError struct {
	File, Field, Reason string
}

func (e *fileError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Field, e.Reason)
}

// loadDeployment loads every agent definition (*.yaml, *.yml, *.json, not
// *.script.yaml) of dir and checks the whole set: schemas through the gate,
// subagents present, slugs unique. The first file at fault fails it.
func loadDeployment(dir string) (*deployment, error) {
	d, err := scanDeployment(dir, true)
	if err != nil {
		return nil, err
	}
	for _, slug := range sortedKeys(d.agents) {
		a := d.agents[slug]
		for i, sub := range a.spec.Subagents {
			if _, ok := d.agents[sub]; !ok {
				return nil, &fileError{File: a.file, Field: fmt.Sprintf("subagents[%d]", i), Reason: fmt.Sprintf("no agent %q in %s", sub, dir)}
			}
		}
	}
	return d, nil
}

// loadDeploymentServing is loadDeployment for a serving node: a file the
// gate refuses is refused alone (d.refused, naming its file and field),
// with every agent whose subagents need it, and the node serves the rest,
// and every run pinned to a version it has stored, whatever its agent's
// file says now: a deploy with one broken file fails no run in flight. It
// fails only when no agent is left to deploy, or the directory cannot be
// read.
func loadDeploymentServing(dir string) (*deployment, error) {
	d, err := scanDeployment(dir, false)
	if err != nil {
		return nil, err
	}
	d.refuseIncomplete()
	if len(d.agents) == 0 {
		if len(d.refused) > 0 {
			return nil, d.refused[0]
		}
		return nil, fmt.Errorf("agents: no agent definitions in %s", dir)
	}
	return d, nil
}

// scanDeployment loads every agent file of dir; a file at fault fails
// the scan when strict, and is refused alone (d.refused) otherwise. A
// strict scan that finds no agent fails.
func scanDeployment(dir string, strict bool) (*deployment, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("agents: %w", err)
	}
	d := &deployment{dir: dir, agents: map[string]*deployed{}}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.Contains(name, ".script.") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) {
			continue
		}
		path := filepath.Join(dir, name)
		a, err := loadAgent(path)
		if err == nil {
			if other, dup := d.agents[a.spec.Slug]; dup {
				err = &fileError{File: path, Field: "slug", Reason: fmt.Sprintf("%q is also defined in %s", a.spec.Slug, other.file)}
			}
		}
		var ferr *fileError
		switch {
		case err == nil:
			d.agents[a.spec.Slug] = a
		case strict:
			return nil, err
		case errors.As(err, &ferr):
			d.refused = append(d.refused, ferr)
		default:
			d.refused = append(d.refused, &fileError{File: path, Reason: err.Error()})
		}
	}
	if strict && len(d.agents) == 0 {
		return nil, fmt.Errorf("agents: no agent definitions in %s", dir)
	}
	return d, nil
}

// refuse takes slug out of the deployment for ferr, and with it every
// agent whose subagents name it.
func (d *deployment) refuse(slug string, ferr *fileError) {
	delete(d.agents, slug)
	d.refused = append(d.refused, ferr)
	d.refuseIncomplete()
}

// refuseIncomplete refuses every agent whose subagents are not deployed,
// until none is left.
func (d *deployment) refuseIncomplete() {
	for changed := true; changed; {
		changed = false
		for _, slug := range sortedKeys(d.agents) {
			a := d.agents[slug]
			for i, sub := range a.spec.Subagents {
				if _, ok := d.agents[sub]; !ok {
					delete(d.agents, slug)
					d.refused = append(d.refused, &fileError{File: a.file, Field: fmt.Sprintf("subagents[%d]", i), Reason: fmt.Sprintf("agent %q is not deployed (its file is missing or was refused)", sub)})
					changed = true
					break
				}
			}
		}
	}
}

// refuseUncatalogued refuses every agent whose capabilities the catalog
// does not hold (a service that did not answer at start, a name
// mistyped), and those that need it.
func (d *deployment) refuseUncatalogued(catalog []runtime.Capability) {
	have := map[string]bool{}
	for _, c := range catalog {
		have[c.Name] = true
	}
	for _, slug := range sortedKeys(d.agents) {
		a, ok := d.agents[slug]
		if !ok {
			continue
		}
		for i, c := range a.spec.Capabilities {
			if !have[c] {
				d.refuse(slug, &fileError{File: a.file, Field: fmt.Sprintf("capabilities[%d]", i), Reason: fmt.Sprintf("capability %q is in no catalog this node has (built in, a service that answered at start, an MCP server)", c)})
				break
			}
		}
	}
}

func loadAgent(path string) (*deployed, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agents: %w", err)
	}
	js := raw
	if !strings.HasSuffix(path, ".json") {
		if js, err = yaml.YAMLToJSON(raw); err != nil {
			return nil, &fileError{File: path, Reason: "not valid YAML: " + err.Error()}
		}
	}
	var f agentFile
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, &fileError{File: path, Reason: err.Error()}
	}
	bad := func(field, format string, args ...any) error {
		return &fileError{File: path, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if f.Slug == "" {
		return nil, bad("slug", "is required")
	}
	if strings.TrimSpace(f.Instructions) == "" {
		return nil, bad("instructions", "is required")
	}
	if f.Limits.ContextTokens <= 0 || f.Limits.OutputTokens <= 0 {
		return nil, bad("limits", "context_tokens and output_tokens are required and positive")
	}
	if len(f.OutputSchema) == 0 {
		return nil, bad("output_schema", "is required")
	}
	for field, raw := range map[string]json.RawMessage{"input_schema": f.InputSchema, "output_schema": f.OutputSchema} {
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if _, err := schema.Compile(raw); err != nil {
			return nil, bad(field, "%v", err)
		}
	}
	retry, ferr := f.Retry.policy()
	if ferr != nil {
		ferr.File = path
		return nil, ferr
	}
	var keep time.Duration
	if f.Retention != "" {
		if keep, err = retention.ParseDuration(f.Retention); err != nil {
			return nil, bad("retention", "%v", err)
		}
	}
	budget := runtime.Budget{Steps: f.Budget.Steps, Tokens: f.Budget.Tokens}
	if f.Budget.Timeout != "" {
		d, err := time.ParseDuration(f.Budget.Timeout)
		if err != nil || d < 0 {
			return nil, bad("budget.timeout", "%q is not a duration like 10m", f.Budget.Timeout)
		}
		budget.Timeout = d
	}
	if budget.Steps < 0 || budget.Tokens < 0 {
		return nil, bad("budget", "limits must not be negative")
	}
	input := f.InputSchema
	if string(input) == "null" {
		input = nil
	}
	def := runtime.AgentDefinition{Slug: f.Slug, Description: f.Description, Instructions: f.Instructions,
		InputSchema: input, OutputSchema: f.OutputSchema, Subagents: f.Subagents, Capabilities: f.Capabilities, ModelOptions: f.ModelOptions}
	if len(def.ModelOptions) > 0 && string(def.ModelOptions) == "null" {
		def.ModelOptions = nil
	}
	return &deployed{file: path, spec: f, retry: retry, retention: keep, hasRetention: f.Retention != "", agent: actors.Agent{Definition: def,
		Limits: runtime.ModelLimits{ContextTokens: f.Limits.ContextTokens, OutputTokens: f.Limits.OutputTokens}, Budget: budget}}, nil
}

// retention is the node's retention policy: def for every agent but
// those whose definition gives their own.
func (d *deployment) retention(def time.Duration) retention.Policy {
	p := retention.Policy{Default: def, Agents: map[string]time.Duration{}}
	for slug, a := range d.agents {
		if a.hasRetention {
			p.Agents[slug] = a.retention
		}
	}
	return p
}

func (d *deployment) list() []actors.Agent {
	slugs := make([]string, 0, len(d.agents))
	for s := range d.agents {
		slugs = append(slugs, s)
	}
	sort.Strings(slugs)
	out := make([]actors.Agent, len(slugs))
	for i, s := range slugs {
		out[i] = d.agents[s].agent
	}
	return out
}

// setupFor is an agent's contract as a deployment defines it.
func setupFor(dep *deployment, agent string) (replay.Setup, error) {
	a, ok := dep.agents[agent]
	if !ok {
		return replay.Setup{}, &flagError{"agents", fmt.Sprintf("agent %q is not deployed here", agent)}
	}
	subs := make([]runtime.AgentDefinition, 0, len(a.agent.Definition.Subagents))
	for _, sub := range a.agent.Definition.Subagents {
		subs = append(subs, dep.agents[sub].agent.Definition)
	}
	return setupOf(a.agent, subs)
}

// setupForRun is the contract run ran under, for its re-drive: the
// definition version it is pinned to, as the log's storage keeps it
// (whatever the files say now), or for a run of an earlier build, which
// names none, its agent's as deployed.
func setupForRun(ctx context.Context, dep *deployment, node *actors.Node, run events.Run) (replay.Setup, error) {
	if run.Definition == "" {
		return setupFor(dep, run.Agent)
	}
	ver, err := node.Version(ctx, run.Definition)
	if err != nil {
		return replay.Setup{}, err
	}
	a, subs, _, err := ver.Run(run.Agent)
	if err != nil {
		return replay.Setup{}, err
	}
	return setupOf(a, subs)
}

// setupOf is the re-drive setup of agent a with its subagents'
// definitions: its capabilities from the built-in catalog, the only one a
// re-drive runs scripts against.
func setupOf(a actors.Agent, subs []runtime.AgentDefinition) (replay.Setup, error) {
	s := replay.Setup{Definition: a.Definition, Subagents: subs, Limits: a.Limits, Budget: a.Budget, Redactor: redactor(nil)}
	caps := map[string]runtime.Capability{}
	for _, c := range kvcap.Capabilities() {
		caps[c.Name] = c
	}
	for _, name := range a.Definition.Capabilities {
		c, ok := caps[name]
		if !ok {
			return replay.Setup{}, fmt.Errorf("agent %s: capability %q is served by an external service; re-drive needs the built-in catalog", a.Definition.Slug, name)
		}
		s.Capabilities = append(s.Capabilities, c)
	}
	return s, nil
}
