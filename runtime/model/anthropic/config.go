package anthropic

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

// Defaults for the zero values of Config.
const (
	DefaultBaseURL        = "https://api.anthropic.com"
	DefaultMaxTokens      = 4096
	DefaultMaxRetries     = 3
	DefaultRetryMaxWait   = 2 * time.Minute
	DefaultRequestTimeout = 10 * time.Minute
)

// The environment variables Config falls back to.
const (
	EnvAPIKey  = "ANTHROPIC_API_KEY"
	EnvBaseURL = "ANTHROPIC_BASE_URL"
)

// Config configures a Model. The host builds it from the agent definition
// (the model name) and its own settings; the key comes from here or from
// the environment, never from the agent definition's options.
type Config struct {
	// Model is the model name sent with every request
	// ("claude-sonnet-4-5"). Required.
	Model string
	// APIKey is sent as the Authorization bearer token (what SDK v2.15
	// does with an API key). Empty means
	// $ANTHROPIC_API_KEY. It is required for Anthropic's own base URL. The
	// key never appears in an error, a log line, Meta or anything else the
	// Model returns.
	APIKey string
	// BaseURL is the API root, without the /v1 segment. Empty means
	// $ANTHROPIC_BASE_URL, and then DefaultBaseURL.
	BaseURL string
	// MaxTokens is the max_tokens of a request whose MaxOutputTokens is
	// zero (Anthropic requires one). Zero means DefaultMaxTokens (4096).
	MaxTokens int
	// HTTPClient sends the requests. Nil means a new http.Client without an
	// overall timeout: RequestTimeout bounds each attempt instead.
	HTTPClient *http.Client
	// RequestTimeout bounds one attempt. Zero means DefaultRequestTimeout
	// (10 minutes); a timed-out attempt is retried like a connection error.
	RequestTimeout time.Duration
	// MaxRetries is how many times a failed attempt (408, 409, 429, 5xx and
	// 529, a connection error or an attempt timeout) is retried. Zero means
	// DefaultMaxRetries (3); a negative value disables retries.
	MaxRetries int
	// RetryMaxWait bounds the total time spent waiting between attempts. A
	// Retry-After that would exceed what is left ends the retries with the
	// server's error. Zero means DefaultRetryMaxWait (2 minutes).
	RetryMaxWait time.Duration
	// BackoffBase is the first wait when the server asks for none; each
	// retry doubles it, up to BackoffMax, and jitters its upper half. Zero
	// means 500ms and 30s.
	BackoffBase, BackoffMax time.Duration
	// Sleep waits between attempts. Nil means a timer that returns early
	// with the context's error. Tests inject a recorder here.
	Sleep func(ctx context.Context, d time.Duration) error
}

// String describes the configuration without its API key.
func (c Config) String() string {
	key := "unset"
	if c.APIKey != "" {
		key = "set"
	}
	return fmt.Sprintf("anthropic.Config{Model:%q BaseURL:%q APIKey:%s}", c.Model, c.BaseURL, key)
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

func (c Config) resolve() (Config, error) {
	if strings.TrimSpace(c.Model) == "" {
		return c, fmt.Errorf("%w: Model is required", ErrConfig)
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
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, fmt.Errorf("%w: BaseURL must be an absolute http or https URL", ErrConfig)
	}
	if u.User != nil {
		return c, fmt.Errorf("%w: BaseURL must not carry credentials; use APIKey", ErrConfig)
	}
	if u.Host == "api.anthropic.com" && c.APIKey == "" {
		return c, fmt.Errorf("%w: APIKey is required for %s (set it or $%s)", ErrConfig, u.Host, EnvAPIKey)
	}
	if strings.ContainsAny(c.APIKey, "\r\n") {
		return c, fmt.Errorf("%w: APIKey contains a line break", ErrConfig)
	}
	switch {
	case c.MaxTokens < 0:
		return c, fmt.Errorf("%w: MaxTokens %d is negative", ErrConfig, c.MaxTokens)
	case c.MaxTokens == 0:
		c.MaxTokens = DefaultMaxTokens
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
