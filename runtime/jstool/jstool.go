// Package jstool is the run_js tool: its definition as the model sees it, the
// executor contract it runs on, the canonical invoker every capability
// callback goes through, and the formatting of script outcomes into tool
// results. It imports no JavaScript engine: runtime/jsexec implements
// Factory on goja, and tests inject their own.
package jstool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
)

// Name is the tool name the model calls.
const Name = "run_js"

// Factory allocates executors. The runtime calls it lazily, on the first
// run_js of an attempt, and closes what it returns on every exit (C41).
type Factory interface {
	NewExecutor(ctx context.Context, cfg Config) (Executor, error)
}

// Config scopes an executor to one attempt of one run.
type Config struct {
	// Capabilities are the only names bound in the realm (C4).
	Capabilities []CapabilityInfo
	// Invoke is the canonical invoker: every callback must go through it.
	Invoke InvokeFunc
}

// CapabilityInfo describes a bound capability.
type CapabilityInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Effect is read-only, idempotent or effectful.
	Effect string `json:"effect,omitempty"`
}

// InvokeFunc runs one capability callback of the script with call ID
// scriptCallID. seq numbers the script's callbacks from 1. The value it
// returns is already redacted (C41).
type InvokeFunc func(ctx context.Context, scriptCallID string, seq int, capability string, args json.RawMessage) (Value, error)

// Value is what a callback hands back to JavaScript.
type Value struct {
	JSON        json.RawMessage
	Attachments []model.Attachment
}

// Executor is one realm. Execute runs a script to completion; its error is an
// executor failure (the realm is unusable), while a script that throws,
// times out or trips a limit is an Outcome with Failure set.
type Executor interface {
	Execute(ctx context.Context, s Script) (Outcome, error)
	Close() error
}

// Script is one run_js call.
type Script struct {
	CallID string
	Code   string
}

// Outcome is the result of one script.
type Outcome struct {
	// Value is the script's returned value as JSON ("null" when none).
	Value       json.RawMessage
	Logs        []LogLine
	LogsDropped int
	Attachments []model.Attachment
	// Failure is set when the script did not complete.
	Failure *Failure
}

// LogLine is one console call.
type LogLine struct {
	Level string `json:"level"`
	Text  string `json:"text"`
}

// Failure says why a script did not complete.
type Failure struct {
	Kind    string `json:"kind"` // exception, timeout, limit, cancelled
	Message string `json:"message"`
}

// Args are run_js arguments.
type Args struct {
	Code string `json:"code"`
}

// InputSchema is the run_js argument schema.
const InputSchema = `{"type":"object","properties":{"code":{"type":"string","minLength":1,"description":"The body of an async JavaScript function. Use await for capability calls and return the data you need."}},"required":["code"],"additionalProperties":false}`

// Definition is the tool definition the model sees, listing the bound
// capabilities with their input schemas.
func Definition(caps []CapabilityInfo) model.ToolDef {
	var b strings.Builder
	b.WriteString("Run JavaScript (the body of an async function) in an isolated realm. ")
	b.WriteString("It has no network, filesystem, process, environment or timers. ")
	b.WriteString("Call capabilities as `await caps.<name>(args)`; each takes one JSON object checked against its schema. ")
	b.WriteString("`return` a JSON-serializable value: it is the tool result, with console output. ")
	b.WriteString("Each script runs in a fresh realm: nothing it leaves in globals reaches the next script, so return what you need. ")
	b.WriteString("If a script fails, do not repeat callbacks that already completed.")
	if len(caps) == 0 {
		b.WriteString("\nNo capabilities are bound.")
	} else {
		b.WriteString("\nCapabilities:")
		sorted := append([]CapabilityInfo(nil), caps...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
		for _, c := range sorted {
			effect := ""
			if c.Effect != "" {
				effect = " [" + c.Effect + "]"
			}
			fmt.Fprintf(&b, "\n- caps.%s(args)%s: %s Input schema: %s", c.Name, effect, c.Description, compactJSON(c.InputSchema))
		}
	}
	return model.ToolDef{Name: Name, Description: b.String(), InputSchema: json.RawMessage(InputSchema)}
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// Callback is the attribution of one capability callback (C41).
type Callback struct {
	ScriptCallID string        `json:"script_call_id"`
	Seq          int           `json:"seq"`
	Capability   string        `json:"capability"`
	ArgsDigest   string        `json:"args_digest"`
	Outcome      string        `json:"outcome"` // ok, error, rejected
	Error        string        `json:"error,omitempty"`
	Duration     time.Duration `json:"duration"`
}
