package openai

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
// an unknown one, or one the configured API does not have, is an error
// naming it. Secrets never belong here (the definition is not secret);
// the API key is in Config.
//
//	key                   APIs        value
//	temperature           both        number, 0 to 2
//	top_p                 both        number, 0 to 1
//	reasoning_effort      both        "none", "minimal", "low", "medium", "high" or "xhigh"
//	verbosity             both        "low", "medium" or "high"
//	parallel_tool_calls   both        boolean
//	tool_choice           both        "auto", "required" or "none"
//	service_tier          both        string ("auto", "default", "flex", "priority")
//	user                  both        string
//	prompt_cache_key      both        string
//	extra_body            both        object merged into the request body, for a compatible
//	                                  server's own parameters ({"top_k": 20}); it may not
//	                                  set model, messages, input, instructions, tools or stream
//	frequency_penalty     chat        number, -2 to 2
//	presence_penalty      chat        number, -2 to 2
//	seed                  chat        integer
//	stop                  chat        array of at most 4 strings
//	reasoning_summary     responses   "auto", "concise" or "detailed"
//	store                 responses   boolean; default false: the transcript, not OpenAI, keeps state
//	encrypted_reasoning   responses   boolean; ask for reasoning items' encrypted_content so they
//	                                  can be sent back with store false. Default: true when
//	                                  reasoning_effort or reasoning_summary is set (models without
//	                                  reasoning reject it)
type Options struct {
	Temperature        *float64                   `json:"temperature,omitempty"`
	TopP               *float64                   `json:"top_p,omitempty"`
	ReasoningEffort    string                     `json:"reasoning_effort,omitempty"`
	Verbosity          string                     `json:"verbosity,omitempty"`
	ParallelToolCalls  *bool                      `json:"parallel_tool_calls,omitempty"`
	ToolChoice         string                     `json:"tool_choice,omitempty"`
	ServiceTier        string                     `json:"service_tier,omitempty"`
	User               string                     `json:"user,omitempty"`
	PromptCacheKey     string                     `json:"prompt_cache_key,omitempty"`
	ExtraBody          map[string]json.RawMessage `json:"extra_body,omitempty"`
	FrequencyPenalty   *float64                   `json:"frequency_penalty,omitempty"`
	PresencePenalty    *float64                   `json:"presence_penalty,omitempty"`
	Seed               *int64                     `json:"seed,omitempty"`
	Stop               []string                   `json:"stop,omitempty"`
	ReasoningSummary   string                     `json:"reasoning_summary,omitempty"`
	Store              *bool                      `json:"store,omitempty"`
	EncryptedReasoning *bool                      `json:"encrypted_reasoning,omitempty"`
}

// optionAPIs says which API has each option; "" is both.
var optionAPIs = map[string]API{
	"temperature": "", "top_p": "", "reasoning_effort": "", "verbosity": "",
	"parallel_tool_calls": "", "tool_choice": "", "service_tier": "", "user": "",
	"prompt_cache_key": "", "extra_body": "",
	"frequency_penalty": APIChat, "presence_penalty": APIChat, "seed": APIChat, "stop": APIChat,
	"reasoning_summary": APIResponses, "store": APIResponses, "encrypted_reasoning": APIResponses,
}

// adapterOwned are body fields extra_body may not set.
var adapterOwned = []string{"model", "messages", "input", "instructions", "tools", "stream"}

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
		return "openai: invalid options: " + e.Reason
	}
	return fmt.Sprintf("openai: invalid options: option %q: %s", e.Option, e.Reason)
}

// Is reports whether target is ErrOptions or model.ErrPermanent.
func (e *OptionError) Is(target error) bool {
	return target == ErrOptions || target == model.ErrPermanent
}

func optErr(option, format string, args ...any) error {
	return &OptionError{Option: option, Reason: fmt.Sprintf(format, args...)}
}

// ParseOptions decodes and checks raw provider options for api. Empty or
// null raw means no options. Errors are *OptionError, naming the option; they match ErrOptions.
func ParseOptions(raw json.RawMessage, api API) (Options, error) {
	var o Options
	if api == "" {
		api = APIChat
	}
	err := provider.DecodeOptions(raw, &o, func(k string) error {
		want, ok := optionAPIs[k]
		if !ok {
			return optErr(k, "unknown option (the %s API knows %s)", api, strings.Join(knownOptions(api), ", "))
		}
		if want != "" && want != api {
			return optErr(k, "is for the %s API, and this model uses the %s API", want, api)
		}
		return nil
	}, optErr)
	if err != nil {
		return o, err
	}
	// The zero Options (empty or null raw) pass check.
	return o, o.check()
}

func knownOptions(api API) []string {
	var out []string
	for k, a := range optionAPIs {
		if a == "" || a == api {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
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
		inRange("temperature", o.Temperature, 0, 2),
		inRange("top_p", o.TopP, 0, 1),
		inRange("frequency_penalty", o.FrequencyPenalty, -2, 2),
		inRange("presence_penalty", o.PresencePenalty, -2, 2),
		oneOf("reasoning_effort", o.ReasoningEffort, "none", "minimal", "low", "medium", "high", "xhigh"),
		oneOf("verbosity", o.Verbosity, "low", "medium", "high"),
		oneOf("tool_choice", o.ToolChoice, "auto", "required", "none"),
		oneOf("reasoning_summary", o.ReasoningSummary, "auto", "concise", "detailed"),
	} {
		if err != nil {
			return err
		}
	}
	if len(o.Stop) > 4 {
		return bad("stop", "%d sequences, at most 4", len(o.Stop))
	}
	return provider.CheckExtraBody(o.ExtraBody, adapterOwned, bad)
}
