// Package anthropic is a model.Model on Anthropic's Messages API
// (POST {BaseURL}/v1/messages), through the official SDK
// (github.com/anthropics/anthropic-sdk-go/v2).
//
// A minimal program:
//
//	m, err := anthropic.New(anthropic.Config{Model: "claude-sonnet-4-5"}) // key from $ANTHROPIC_API_KEY
//	if err != nil { ... }
//	resp, err := m.Generate(ctx, model.Request{
//		System:          "Answer briefly.",
//		Messages:        []model.Message{model.TextMessage("m1", model.RoleUser, "Hello")},
//		MaxOutputTokens: 4096,
//		Options:         json.RawMessage(`{"thinking_budget":2048}`),
//	})
//
// Options (Request.Options, the agent definition's model_options) are a
// JSON object; an unknown key is an error naming it: temperature, top_p,
// top_k, stop_sequences, thinking, thinking_budget, effort, tool_choice,
// disable_parallel_tool_use, service_tier, metadata_user_id, extra_body.
// See Options.
//
// How the transcript maps onto the API:
//
//   - Request.System is the system prompt.
//   - User and tool messages are user turns, assistant messages assistant
//     turns; consecutive turns of one role are merged, because the API
//     needs them to alternate. Tool results become tool_result blocks
//     (is_error set for failed calls) at the start of the user turn that
//     follows the assistant's tool_use blocks, in order.
//   - Thinking and redacted_thinking blocks become reasoning parts; their
//     signature (MetaSignature) or data (MetaRedactedThinking) is kept in
//     Part.Meta exactly as received and sent back unchanged, before the
//     tool_use blocks they led to. Reasoning without either (another
//     provider's) is not sent.
//   - Tool calls keep their IDs; Args is the exact bytes of the input
//     object the API sent. A call whose arguments are not a JSON object is
//     sent back as {"_unparsed_input": "<the text>"}.
//   - A message that maps to no content is left out (the API rejects empty
//     content).
//
// What the adapter guarantees:
//
//  1. One complete response per Generate (no streaming); tool definitions
//     never execute anything.
//  2. Usage: InputTokens is the whole prompt (input_tokens plus cache
//     creation and cache read tokens), CachedInputTokens the cache reads,
//     OutputTokens, ReasoningTokens (thinking tokens, when reported). The
//     cache creation count is in Message.Meta[MetaCacheCreation] and the
//     raw usage in Meta[MetaUsage]. A 200 response it cannot use returns a
//     Response with the usage and an error wrapping ErrResponse, so
//     model.WithUsage records it (C34).
//  3. Retries: 408, 409, 429, 5xx (529 overloaded included), a response
//     saying x-should-retry: true, connection errors and attempt
//     timeouts, at most Config.MaxRetries times and Config.RetryMaxWait
//     of waiting in total, honouring Retry-After exactly, otherwise an
//     exponential backoff with jitter. The SDK's own retries are off, so
//     each attempt is one HTTP request. Other 4xx (400, 401, 403, 404,
//     422...), malformed responses, invalid options and requests are
//     tried once and match model.ErrPermanent; a cancelled context ends
//     the call at once and is not permanent; retries run out are (the
//     loop is the only one: a run does not try the step again). Each
//     failed attempt is reported to the context's model.Trace.
//  4. stop_reason "refusal" adds a text part starting with RefusalPrefix
//     (the stop details in Part.Meta[MetaRefusal]); "max_tokens" returns
//     the message as far as it got, with a cut-off tool call kept as sent.
//  5. Metadata is under "anthropic." keys; "cairn." keys and other
//     adapters' keys are never read or sent.
//  6. The API key is sent only in the request's authorization header. It
//     is never in an error, Meta, or a printed Config. No other
//     environment variable the SDK knows (ANTHROPIC_AUTH_TOKEN, profiles,
//     custom headers) is read, and the SDK's OpenTelemetry spans are off.
//
// The caller's duties:
//
//  1. Build one Model per configuration and share it; it is safe for
//     concurrent use.
//  2. Wrap it with model.WithUsage so every reported token is recorded.
//  3. Check a definition's options early with Model.ValidateOptions.
//  4. Keep the reasoning parts' text unchanged between requests: a
//     thinking block whose text changed no longer matches its signature,
//     and the API rejects it.
//  5. Pass a context with the run's deadline: it bounds every attempt and
//     every wait.
package anthropic
