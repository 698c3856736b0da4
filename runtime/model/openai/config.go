package openai

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

// API selects the OpenAI API surface a Model speaks.
type API string

// The API surfaces.
const (
	// APIChat is the Chat Completions API (POST {base}/chat/completions),
	// which OpenAI and the compatible servers (Ollama, vLLM, LM Studio,
	// OpenRouter, llama.cpp) all serve. It is the default.
	APIChat API = "chat"
	// APIResponses is OpenAI's Responses API (POST {base}/responses). Use it
	// with OpenAI's reasoning models: it is the only surface that returns
	// their reasoning items (encrypted), which the adapter keeps in Meta and
	// sends back on the next request.
	APIResponses API = "responses"
)

// The values of Config.MaxTokensParam.
const (
	MaxTokensAuto       = ""
	MaxTokensCompletion = "max_completion_tokens"
	MaxTokensLegacy     = "max_tokens"
)

// Defaults for the zero values of Config.
const (
	DefaultBaseURL        = "https://api.openai.com/v1"
	DefaultMaxRetries     = 3
	DefaultRetryMaxWait   = 2 * time.Minute
	DefaultRequestTimeout = 10 * time.Minute
)

// The environment variables Config falls back to.
const (
	EnvAPIKey       = "OPENAI_API_KEY"
	EnvBaseURL      = "OPENAI_BASE_URL"
	EnvOrganization = "OPENAI_ORG_ID"
	EnvProject      = "OPENAI_PROJECT_ID"
)

// Config configures a Model. The host builds it from the agent definition
// (the model name) and its own settings; secrets come from here or from the
// environment and never from the agent definition's options.
type Config struct {
	// Model is the model name sent with every request ("gpt-4.1-mini",
	// "llama3.1:8b"). Required.
	Model string
	// API is the API surface; the zero value is APIChat.
	API API
	// APIKey is the bearer token. Empty means $OPENAI_API_KEY. It is
	// required for OpenAI's own base URL; a compatible server on another
	// base URL (a local Ollama, say) may need none. The key is sent only as
	// the Authorization header: it never appears in an error, a log line,
	// Meta or anything else the Model returns.
	APIKey string
	// BaseURL is the API root, up to and including the version segment
	// ("http://localhost:11434/v1"). Empty means $OPENAI_BASE_URL, and then
	// DefaultBaseURL.
	BaseURL string
	// Organization and Project are sent as the OpenAI-Organization and
	// OpenAI-Project headers. Empty means $OPENAI_ORG_ID and
	// $OPENAI_PROJECT_ID, and then no header.
	Organization string
	Project      string
	// HTTPClient sends the requests. Nil means a new http.Client without an
	// overall timeout: RequestTimeout bounds each attempt instead.
	HTTPClient *http.Client
	// RequestTimeout bounds one attempt (connect, generation and reading the
	// body). Zero means DefaultRequestTimeout (10 minutes); a timed-out
	// attempt is retried like a connection error.
	RequestTimeout time.Duration
	// MaxRetries is how many times a failed attempt (408, 409, 429, 5xx, a
	// connection error or an attempt timeout) is retried. Zero means DefaultMaxRetries
	// (3); a negative value disables retries.
	MaxRetries int
	// RetryMaxWait bounds the total time spent waiting between attempts. A
	// Retry-After that would exceed what is left ends the retries with the
	// server's error. Zero means DefaultRetryMaxWait (2 minutes).
	RetryMaxWait time.Duration
	// BackoffBase is the first wait when the server asks for none; each
	// retry doubles it, up to BackoffMax, and jitters its upper half. Zero
	// means 500ms and 30s.
	BackoffBase, BackoffMax time.Duration
	// MaxTokensParam names the request field that carries
	// Request.MaxOutputTokens in the Chat Completions API: MaxTokensCompletion
	// ("max_completion_tokens", which OpenAI's reasoning models require) or
	// MaxTokensLegacy ("max_tokens", which every compatible server reads).
	// MaxTokensAuto (empty) picks max_completion_tokens for OpenAI's own
	// base URL and max_tokens for any other.
	MaxTokensParam string
	// EchoReasoning sends the reasoning a compatible server returned
	// (reasoning_content, reasoning, reasoning_details) back on the
	// assistant messages of later Chat Completions requests. DeepSeek's
	// thinking mode and OpenRouter need it across tool calls; some servers
	// reject the fields, so it is off by default. The Responses API always
	// sends its reasoning items back and ignores this field.
	EchoReasoning bool
	// Sleep waits between attempts. Nil means a timer that returns early
	// with the context's error. Tests inject a recorder here to check the
	// backoff without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
}

// String describes the configuration without its API key, so that a
// Config printed with %v or %+v never shows the key.
func (c Config) String() string {
	key := "unset"
	if c.APIKey != "" {
		key = "set"
	}
	return fmt.Sprintf("openai.Config{Model:%q API:%q BaseURL:%q APIKey:%s}", c.Model, c.API, c.BaseURL, key)
}

// GoString is String, for %#v.
func (c Config) GoString() string { return c.String() }

// Validate reports the first invalid field, after the environment
// fallbacks are applied. The error wraps ErrConfig and never contains the
// API key.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve applies the environment fallbacks and defaults and validates.
func (c Config) resolve() (Config, error) {
	if strings.TrimSpace(c.Model) == "" {
		return c, fmt.Errorf("%w: Model is required", ErrConfig)
	}
	switch c.API {
	case "":
		c.API = APIChat
	case APIChat, APIResponses:
	default:
		return c, fmt.Errorf("%w: API %q is not %q or %q", ErrConfig, c.API, APIChat, APIResponses)
	}
	if c.APIKey == "" {
		c.APIKey = os.Getenv(EnvAPIKey)
	}
	if c.BaseURL == "" {
		c.BaseURL = os.Getenv(EnvBaseURL)
	}
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	if c.Organization == "" {
		c.Organization = os.Getenv(EnvOrganization)
	}
	if c.Project == "" {
		c.Project = os.Getenv(EnvProject)
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The parse error may quote the URL; a URL can carry credentials,
		// so say only what is wrong with it.
		return c, fmt.Errorf("%w: BaseURL must be an absolute http or https URL", ErrConfig)
	}
	if u.User != nil {
		return c, fmt.Errorf("%w: BaseURL must not carry credentials; use APIKey", ErrConfig)
	}
	official := u.Host == "api.openai.com"
	if official && c.APIKey == "" {
		return c, fmt.Errorf("%w: APIKey is required for %s (set it or $%s)", ErrConfig, u.Host, EnvAPIKey)
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return c, fmt.Errorf("%w: APIKey contains a line break", ErrConfig)
	}
	switch c.MaxTokensParam {
	case MaxTokensAuto:
		c.MaxTokensParam = MaxTokensLegacy
		if official {
			c.MaxTokensParam = MaxTokensCompletion
		}
	case MaxTokensCompletion, MaxTokensLegacy:
	default:
		return c, fmt.Errorf("%w: MaxTokensParam %q is not %q or %q", ErrConfig, c.MaxTokensParam, MaxTokensCompletion, MaxTokensLegacy)
	}
	switch {
	case c.RequestTimeout < 0:
		return c, fmt.Errorf("%w: RequestTimeout %s is negative", ErrConfig, c.RequestTimeout)
	case c.RequestTimeout == 0:
		c.RequestTimeout = DefaultRequestTimeout
	}
	switch {
	case c.MaxRetries < 0:
		c.MaxRetries = 0
	case c.MaxRetries == 0:
		c.MaxRetries = DefaultMaxRetries
	}
	switch {
	case c.RetryMaxWait < 0:
		return c, fmt.Errorf("%w: RetryMaxWait %s is negative", ErrConfig, c.RetryMaxWait)
	case c.RetryMaxWait == 0:
		c.RetryMaxWait = DefaultRetryMaxWait
	}
	if c.BackoffBase < 0 || c.BackoffMax < 0 || (c.BackoffMax > 0 && c.BackoffBase > c.BackoffMax) {
		return c, fmt.Errorf("%w: BackoffBase %s and BackoffMax %s: want 0 <= BackoffBase <= BackoffMax", ErrConfig, c.BackoffBase, c.BackoffMax)
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Sleep == nil {
		c.Sleep = provider.Sleep
	}
	return c, nil
}
