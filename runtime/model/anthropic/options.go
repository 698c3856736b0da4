package anthropic

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

// Options are the provider options an agent definition may set in its
// model_options (Request.Options), as a JSON object. Every key is checked:
// an unknown one is an error naming it.
//
//	key                        value
//	temperature                number, 0 to 1
//	top_p                      number, 0 to 1
//	top_k                      integer >= 0
//	stop_sequences             array of strings
//	thinking                   "enabled" (needs thinking_budget), "adaptive" or "disabled"
//	thinking_budget            integer >= 1024 and below the request's max_tokens;
//	                           alone it means thinking "enabled"
//	effort                     "low", "medium", "high", "xhigh" or "max" (output_config.effort)
//	tool_choice                "auto", "any" or "none"
//	disable_parallel_tool_use  boolean
//	service_tier               "auto" or "standard_only"
//	metadata_user_id           string, an opaque ID of the end user
//	extra_body                 object merged into the request body; it may not set
//	                           model, messages, system, tools, max_tokens or stream
type Options struct {
	Temperature            *float64                   `json:"temperature,omitempty"`
	TopP                   *float64                   `json:"top_p,omitempty"`
	TopK                   *int64                     `json:"top_k,omitempty"`
	StopSequences          []string                   `json:"stop_sequences,omitempty"`
	Thinking               string                     `json:"thinking,omitempty"`
	ThinkingBudget         *int64                     `json:"thinking_budget,omitempty"`
	Effort                 string                     `json:"effort,omitempty"`
	ToolChoice             string                     `json:"tool_choice,omitempty"`
	DisableParallelToolUse *bool                      `json:"disable_parallel_tool_use,omitempty"`
	ServiceTier            string                     `json:"service_tier,omitempty"`
	MetadataUserID         string                     `json:"metadata_user_id,omitempty"`
	ExtraBody              map[string]json.RawMessage `json:"extra_body,omitempty"`
}

var optionNames = []string{"temperature", "top_p", "top_k", "stop_sequences", "thinking", "thinking_budget", "effort",
	"tool_choice", "disable_parallel_tool_use", "service_tier", "metadata_user_id", "extra_body"}

var adapterOwned = []string{"model", "messages", "system", "tools", "max_tokens", "stream"}

// OptionError is an invalid provider option. It matches ErrOptions and
// model.ErrPermanent.
type OptionError struct {
	// Option is the option's key; empty when the options as a whole are
	// invalid (not a JSON object).
	Option string
	// Reason says what is wrong, for people.
	Reason string
}

func (e *OptionError) Error() string {
	if e.Option == "" {
		return "anthropic: invalid options: " + e.Reason
	}
	return fmt.Sprintf("anthropic: invalid options: option %q: %s", e.Option, e.Reason)
}

// Is reports whether target is ErrOptions or model.ErrPermanent.
func (e *OptionError) Is(target error) bool {
	return target == ErrOptions || target == model.ErrPermanent
}

func optErr(option, format string, args ...any) error {
	return &OptionError{Option: option, Reason: fmt.Sprintf(format, args...)}
}

// ParseOptions decodes and checks raw provider options. Empty or null raw
// means no options. Errors are *OptionError, naming the option; they match ErrOptions. Checks
// that need the request (thinking_budget below max_tokens) are made by
// Generate.
func ParseOptions(raw json.RawMessage) (Options, error) {
	var o Options
	err := provider.DecodeOptions(raw, &o, func(k string) error {
		if !slices.Contains(optionNames, k) {
			known := slices.Clone(optionNames)
			sort.Strings(known)
			return optErr(k, "unknown option (known: %s)", strings.Join(known, ", "))
		}
		return nil
	}, optErr)
	if err != nil {
		return o, err
	}
	// The zero Options (empty or null raw) pass check.
	return o, o.check()
}

func (o Options) check() error {
	bad := optErr
	inRange := func(name string, v *float64, lo, hi float64) error {
		if v != nil && (*v < lo || *v > hi) {
			return bad(name, "%g is outside [%g, %g]", *v, lo, hi)
		}
		return nil
	}
	oneOf := func(name, v string, allowed ...string) error {
		if v != "" && !slices.Contains(allowed, v) {
			return bad(name, "%q is not one of %s", v, strings.Join(allowed, ", "))
		}
		return nil
	}
	for _, err := range []error{
		inRange("temperature", o.Temperature, 0, 1),
		inRange("top_p", o.TopP, 0, 1),
		oneOf("thinking", o.Thinking, "enabled", "adaptive", "disabled"),
		oneOf("effort", o.Effort, "low", "medium", "high", "xhigh", "max"),
		oneOf("tool_choice", o.ToolChoice, "auto", "any", "none"),
		oneOf("service_tier", o.ServiceTier, "auto", "standard_only"),
	} {
		if err != nil {
			return err
		}
	}
	if o.TopK != nil && *o.TopK < 0 {
		return bad("top_k", "%d is negative", *o.TopK)
	}
	if o.ThinkingBudget != nil && *o.ThinkingBudget < 1024 {
		return bad("thinking_budget", "%d is below the minimum of 1024", *o.ThinkingBudget)
	}
	switch {
	case o.Thinking == "enabled" && o.ThinkingBudget == nil:
		return bad("thinking", `"enabled" needs thinking_budget`)
	case o.ThinkingBudget != nil && o.Thinking != "" && o.Thinking != "enabled":
		return bad("thinking_budget", "is set but thinking is %q", o.Thinking)
	}
	return provider.CheckExtraBody(o.ExtraBody, adapterOwned, bad)
}
