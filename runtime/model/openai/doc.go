// Package openai is a model.Model on the OpenAI API, through the official
// SDK (github.com/openai/openai-go/v3), for OpenAI itself and for the
// servers that speak its Chat Completions API: Ollama, vLLM, LM Studio,
// OpenRouter, llama.cpp.
//
// Two API surfaces:
//
//   - APIChat (the default): POST {BaseURL}/chat/completions. Every
//     compatible server has it. The reasoning some of them return
//     (reasoning_content, reasoning, reasoning_details) becomes reasoning
//     parts and Meta, and goes back with Config.EchoReasoning.
//   - APIResponses: POST {BaseURL}/responses, OpenAI's own. Use it for
//     OpenAI's reasoning models: their reasoning items, with the encrypted
//     content, are kept byte for byte in Part.Meta and sent back, so a
//     stateless request (store false, the default) continues the model's
//     reasoning across tool calls.
//
// A minimal program:
//
//	m, err := openai.New(openai.Config{Model: "gpt-4.1-mini"}) // key from $OPENAI_API_KEY
//	if err != nil { ... }
//	resp, err := m.Generate(ctx, model.Request{
//		System:          "Answer briefly.",
//		Messages:        []model.Message{model.TextMessage("m1", model.RoleUser, "Hello")},
//		MaxOutputTokens: 512,
//		Options:         json.RawMessage(`{"temperature":0.2}`),
//	})
//
// For a local server: openai.Config{Model: "llama3.1:8b", BaseURL:
// "http://localhost:11434/v1"} (no key needed).
//
// Options (Request.Options, the agent definition's model_options) are a
// JSON object; an unknown key is an error naming it. Both APIs:
// temperature, top_p, reasoning_effort, verbosity, parallel_tool_calls,
// tool_choice, service_tier, user, prompt_cache_key, extra_body. Chat
// only: frequency_penalty, presence_penalty, seed, stop. Responses only:
// reasoning_summary, store, encrypted_reasoning. See Options.
//
// What the adapter guarantees:
//
//  1. One complete response per Generate (no streaming); tool definitions
//     never execute anything; tool calls keep their IDs and the argument
//     text exactly as the server sent it, malformed or cut off included.
//  2. Usage: input (prompt) tokens, output tokens, cached input tokens,
//     reasoning tokens. A 200 response it cannot use returns a Response
//     with the usage it reported and an error wrapping ErrResponse, so
//     model.WithUsage records it (C34).
//  3. Provider metadata (response ID, model, system fingerprint, finish
//     reason, raw usage, reasoning items) is in Message.Meta and Part.Meta
//     under "openai." keys; "cairn." keys and other adapters' keys are
//     never read or sent. Text and arguments go back from the (redacted)
//     parts, never from Meta.
//  4. Retries: 408, 409, 429, 5xx, a response saying x-should-retry:
//     true, connection errors and attempt timeouts, at most
//     Config.MaxRetries times and Config.RetryMaxWait of waiting in total,
//     honouring Retry-After and retry-after-ms exactly, otherwise an
//     exponential backoff with jitter. The SDK's own retries are off, so
//     each attempt is one HTTP request. Other 4xx (400, 401, 403, 404,
//     422...), malformed responses, invalid options and requests are
//     tried once and match model.ErrPermanent; a cancelled context ends
//     the call at once and is not permanent; retries run out are (the
//     loop is the only one: a run does not try the step again). Each
//     failed attempt is reported to the context's model.Trace.
//  5. A refusal is a text part starting with RefusalPrefix, with the
//     refusal in Part.Meta[MetaRefusal]; a max-tokens stop returns the
//     message as far as it got, with StopReason "length" (chat) or
//     "max_output_tokens" (responses).
//  6. The API key is sent only in the Authorization header. It is never in
//     an error (echoes from the server are removed), Meta, or a printed
//     Config.
//
// The caller's duties:
//
//  1. Build one Model per provider configuration and share it; it is safe
//     for concurrent use.
//  2. Wrap it with model.WithUsage so every reported token is recorded.
//  3. Check a definition's options early with Model.ValidateOptions.
//  4. Pass a context with the run's deadline: it bounds every attempt and
//     every wait.
package openai
