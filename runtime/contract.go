package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/schema"
)

// The direct model controls besides run_js and spawn_<slug> (C38).
const (
	ToolContinue = "continue_agent"
	ToolGet      = "get_calls"
	ToolWait     = "wait_calls"
	ToolCancel   = "cancel_calls"
	ToolComplete = "complete"
	SpawnPrefix  = "spawn_"
)

// maxToolName is the longest tool name providers accept.
const maxToolName = 64

var (
	slugRE       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	capabilityRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*$`)
	unsafeRune   = regexp.MustCompile(`[^a-z0-9_]+`)
)

// SanitizeSlug turns a slug into the suffix of its spawn tool name: lower
// case, runs of characters outside [a-z0-9_] become one underscore.
func SanitizeSlug(slug string) string {
	return unsafeRune.ReplaceAllString(strings.ToLower(slug), "_")
}

// contract is everything compiled from an Input before any durable work.
type contract struct {
	hash       string
	tools      []model.ToolDef
	spawn      map[string]*AgentDefinition // tool name -> child
	childInput map[string]*schema.Schema   // slug -> input schema
	completion *schema.Schema
	caps       []jstool.Capability
	args       map[string]*schema.Schema // control tool name -> argument schema
}

const (
	idsSchema      = `{"type":"array","items":{"type":"string","minLength":1},"minItems":1,"uniqueItems":true,"description":"call_id values returned by spawn_* or continue_agent"}`
	getSchema      = `{"type":"object","properties":{"ids":` + idsSchema + `},"required":["ids"],"additionalProperties":false}`
	cancelSchema   = getSchema
	waitSchema     = `{"type":"object","properties":{"ids":` + idsSchema + `,"mode":{"enum":["all","any"],"description":"all (default): wait until every call finished; any: until one did"},"timeout_seconds":{"type":"integer","minimum":0,"maximum":604800,"description":"0 or absent: no timeout. A timeout returns the current state and cancels nothing."}},"required":["ids"],"additionalProperties":false}`
	continueSchema = `{"type":"object","properties":{"session_id":{"type":"string","minLength":1},"prompt":{"type":"string","minLength":1}},"required":["session_id","prompt"],"additionalProperties":false}`
)

func nilish(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// validate checks Input (C1, C3, C33) and compiles the contract (C40, C38,
// C39, C9). It performs no I/O.
func (in *Input) validate() (*contract, error) {
	for _, f := range []struct {
		name string
		v    any
	}{
		{"Model", in.Model}, {"Store", in.Store}, {"Backend", in.Backend},
		{"ExecutorFactory", in.ExecutorFactory}, {"Controller", in.Controller},
		{"Sink", in.Sink}, {"Redactor", in.Redactor},
	} {
		if nilish(f.v) {
			return nil, inputErr(f.name, "is required")
		}
	}
	if in.ModelLimits.ContextTokens <= 0 {
		return nil, inputErr("ModelLimits.ContextTokens", "must be positive, got %d", in.ModelLimits.ContextTokens)
	}
	if in.ModelLimits.OutputTokens <= 0 {
		return nil, inputErr("ModelLimits.OutputTokens", "must be positive, got %d", in.ModelLimits.OutputTokens)
	}
	if in.ModelLimits.OutputTokens >= in.ModelLimits.ContextTokens {
		return nil, inputErr("ModelLimits.OutputTokens", "%d leaves no room in a context of %d", in.ModelLimits.OutputTokens, in.ModelLimits.ContextTokens)
	}
	if err := validateBudget(in.Budget); err != nil {
		return nil, err
	}
	return in.compile()
}

// compile checks and compiles what the contract is made of: the
// definition, its subagents and the capability catalog (C3, C40, C38,
// C39), and hashes it (C9). It reads no other field of in, so ContractHash
// gets the loop's hash, and the loop's refusals, without a run.
func (in *Input) compile() (*contract, error) {
	c := &contract{spawn: map[string]*AgentDefinition{}, childInput: map[string]*schema.Schema{}, args: map[string]*schema.Schema{}}
	def := &in.Definition
	if !slugRE.MatchString(def.Slug) {
		return nil, inputErr("Definition.Slug", "%q is not a slug (letters, digits, . _ -, up to 128)", def.Slug)
	}
	if len(def.OutputSchema) == 0 {
		return nil, inputErr("Definition.OutputSchema", "is required")
	}
	out, err := schema.Compile(def.OutputSchema)
	if err != nil {
		return nil, inputErr("Definition.OutputSchema", "%v", err)
	}
	if len(def.InputSchema) > 0 {
		if _, err := schema.Compile(def.InputSchema); err != nil {
			return nil, inputErr("Definition.InputSchema", "%v", err)
		}
	}
	if len(def.ModelOptions) > 0 && !json.Valid(def.ModelOptions) {
		return nil, inputErr("Definition.ModelOptions", "is not valid JSON")
	}
	if c.completion, err = schema.CompletionSchema(out); err != nil {
		return nil, inputErr("Definition.OutputSchema", "completion schema: %v", err)
	}
	if err := c.compileChildren(in); err != nil {
		return nil, err
	}
	if err := c.compileCapabilities(in); err != nil {
		return nil, err
	}
	builtin := map[string]string{jstool.Name: jstool.InputSchema}
	if len(c.spawn) > 0 {
		// The child controls are offered only to agents with subagents.
		for name, raw := range map[string]string{ToolGet: getSchema, ToolCancel: cancelSchema, ToolWait: waitSchema, ToolContinue: continueSchema} {
			builtin[name] = raw
		}
	}
	for name, raw := range builtin {
		s, err := schema.Compile([]byte(raw))
		if err != nil {
			panic(fmt.Sprintf("runtime: built-in schema %s rejected: %v", name, err))
		}
		c.args[name] = s
	}
	c.buildTools(in)
	c.hash = contractHash(in, c)
	return c, nil
}

func validateBudget(b Budget) error {
	if b.Steps < 0 {
		return inputErr("Budget.Steps", "must not be negative, got %d", b.Steps)
	}
	if b.Tokens < 0 {
		return inputErr("Budget.Tokens", "must not be negative, got %d", b.Tokens)
	}
	if b.Timeout < 0 {
		return inputErr("Budget.Timeout", "must not be negative, got %s", b.Timeout)
	}
	return nil
}

func (c *contract) compileChildren(in *Input) error {
	want := map[string]bool{}
	for i, slug := range in.Definition.Subagents {
		if want[slug] {
			return inputErr(fmt.Sprintf("Definition.Subagents[%d]", i), "duplicate slug %q", slug)
		}
		want[slug] = true
	}
	seen := map[string]bool{}
	for i := range in.Subagents {
		d := &in.Subagents[i]
		field := fmt.Sprintf("Subagents[%d]", i)
		if !want[d.Slug] {
			return inputErr(field, "slug %q is not in Definition.Subagents", d.Slug)
		}
		if seen[d.Slug] {
			return inputErr(field, "duplicate slug %q", d.Slug)
		}
		seen[d.Slug] = true
		if len(d.InputSchema) == 0 {
			return inputErr(field+".InputSchema", "is required for a subagent")
		}
		s, err := schema.Compile(d.InputSchema)
		if err != nil {
			return inputErr(field+".InputSchema", "%v", err)
		}
		if !s.IsObjectType() {
			return inputErr(field+".InputSchema", `top level must be "type": "object" (it is a tool input schema)`)
		}
		name := SpawnPrefix + SanitizeSlug(d.Slug)
		if len(name) > maxToolName {
			return inputErr(field+".Slug", "spawn tool name %q is longer than %d", name, maxToolName)
		}
		if other, ok := c.spawn[name]; ok {
			return inputErr(field+".Slug", "%q and %q both sanitize to tool %q", other.Slug, d.Slug, name)
		}
		c.spawn[name] = d
		c.childInput[d.Slug] = s
	}
	for _, slug := range in.Definition.Subagents {
		if !seen[slug] {
			return inputErr("Subagents", "no definition for subagent %q", slug)
		}
	}
	return nil
}

func (c *contract) compileCapabilities(in *Input) error {
	seen := map[string]bool{}
	for i, cp := range in.Capabilities {
		field := fmt.Sprintf("Capabilities[%d]", i)
		if !capabilityRE.MatchString(cp.Name) {
			return inputErr(field+".Name", "%q is not a dotted JavaScript identifier path", cp.Name)
		}
		if seen[cp.Name] {
			return inputErr(field+".Name", "duplicate capability %q", cp.Name)
		}
		seen[cp.Name] = true
		if len(cp.InputSchema) == 0 {
			return inputErr(field+".InputSchema", "is required")
		}
		switch cp.Effect {
		case "", EffectReadOnly, EffectIdempotent, EffectEffectful:
		default:
			return inputErr(field+".Effect", "%q is not read-only, idempotent or effectful", cp.Effect)
		}
		s, err := schema.Compile(cp.InputSchema)
		if err != nil {
			return inputErr(field+".InputSchema", "%v", err)
		}
		effect := cp.Effect
		if effect == "" {
			effect = EffectEffectful
		}
		c.caps = append(c.caps, jstool.Capability{Info: jstool.CapabilityInfo{Name: cp.Name, Description: cp.Description, InputSchema: s.Raw(), Effect: effect}, Schema: s})
	}
	// A name that is a prefix path of another (kv and kv.get) cannot be both
	// a function and a namespace in the realm.
	for a := range seen {
		for b := range seen {
			if strings.HasPrefix(b, a+".") {
				return inputErr("Capabilities", "%q is both a capability and a namespace of %q", a, b)
			}
		}
	}
	sort.Slice(c.caps, func(i, j int) bool { return c.caps[i].Info.Name < c.caps[j].Info.Name })
	return nil
}

func (c *contract) buildTools(in *Input) {
	infos := make([]jstool.CapabilityInfo, len(c.caps))
	for i, cp := range c.caps {
		infos[i] = cp.Info
	}
	c.tools = append(c.tools, jstool.Definition(infos))
	names := make([]string, 0, len(c.spawn))
	for n := range c.spawn {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := c.spawn[n]
		desc := fmt.Sprintf("Start the subagent %q as a child run. Returns its call_id; use wait_calls or get_calls for its reply.", d.Slug)
		if d.Description != "" {
			desc += " " + d.Description
		}
		c.tools = append(c.tools, model.ToolDef{Name: n, Description: desc, InputSchema: json.RawMessage(d.InputSchema)})
	}
	if len(c.spawn) > 0 {
		c.tools = append(c.tools,
			model.ToolDef{Name: ToolContinue, Description: "Start a new run in a completed child session with a follow-up prompt. Returns a new call_id.", InputSchema: json.RawMessage(continueSchema)},
			model.ToolDef{Name: ToolGet, Description: "Inspect child calls by call_id without waiting.", InputSchema: json.RawMessage(getSchema)},
			model.ToolDef{Name: ToolWait, Description: "Wait for child calls to finish (all or any), with an optional timeout. Returns their replies.", InputSchema: json.RawMessage(waitSchema)},
			model.ToolDef{Name: ToolCancel, Description: "Cancel child calls by call_id.", InputSchema: json.RawMessage(cancelSchema)},
		)
	}
	c.tools = append(c.tools, model.ToolDef{Name: ToolComplete, Description: `Finish the run: {"type":"output","output":...} with the output contract, or {"type":"needs_input","question":"..."} when you cannot go on without the user. Calls after a successful complete are skipped.`, InputSchema: c.completion.Raw()})
}

// contractHash covers the checkpoint format, the definition, every subagent's
// definition and the capability catalog, with schemas in canonical form so
// whitespace and key order do not matter (C9).
func contractHash(in *Input, c *contract) string {
	type defHash struct {
		Slug, Description, Instructions string
		Input, Output                   string
		Subagents, Capabilities         []string
		Options                         string
	}
	canon := func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return ""
		}
		s, err := schema.Compile(raw)
		if err != nil {
			return string(raw)
		}
		return string(s.Canonical())
	}
	hd := func(d *AgentDefinition) defHash {
		return defHash{d.Slug, d.Description, d.Instructions, canon(d.InputSchema), canon(d.OutputSchema),
			append([]string(nil), d.Subagents...), append([]string(nil), d.Capabilities...), string(d.ModelOptions)}
	}
	subs := make([]defHash, 0, len(in.Subagents))
	for i := range in.Subagents {
		subs = append(subs, hd(&in.Subagents[i]))
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].Slug < subs[j].Slug })
	caps := make([][4]string, len(c.caps))
	for i, cp := range c.caps {
		caps[i] = [4]string{cp.Info.Name, cp.Info.Description, string(cp.Schema.Canonical()), cp.Info.Effect}
	}
	b, err := json.Marshal(struct {
		Version      int
		Definition   defHash
		Subagents    []defHash
		Capabilities [][4]string
	}{CheckpointVersion, hd(&in.Definition), subs, caps})
	if err != nil {
		panic("runtime: contract hash: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
