package anthropic

import (
	"context"
	"encoding/json"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

// Meta keys the adapter writes into Message.Meta and Part.Meta and reads
// back on later requests. Values are the provider's bytes: strings as
// their text, JSON values as the JSON the server sent.
const (
	MetaMessageID        = "anthropic.message_id"
	MetaModel            = "anthropic.model"
	MetaStopReason       = "anthropic.stop_reason"
	MetaStopSequence     = "anthropic.stop_sequence"
	MetaStopDetails      = "anthropic.stop_details" // raw JSON, e.g. a refusal's category and explanation
	MetaUsage            = "anthropic.usage"        // the usage object, raw JSON, with the cache creation details
	MetaCacheCreation    = "anthropic.cache_creation_input_tokens"
	MetaSignature        = "anthropic.signature"         // Part.Meta of a thinking block
	MetaRedactedThinking = "anthropic.redacted_thinking" // Part.Meta of a redacted_thinking block: its data
	MetaRefusal          = "anthropic.refusal"           // Part.Meta of the refusal text part: the stop details
)

// RefusalPrefix starts the text part a refusal becomes: a refusal is an
// answer, not an error.
const RefusalPrefix = "[refusal] "

// Model is a model.Model on Anthropic's Messages API. It is safe for
// concurrent use.
type Model struct {
	cfg Config
	msg sdk.MessageService
}

var _ model.Model = (*Model)(nil)

// New returns a Model for cfg. It fails with an error wrapping ErrConfig
// when cfg is invalid; it makes no request.
func New(cfg Config) (*Model, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	opts := []option.RequestOption{
		// Only what Config says: no ANTHROPIC_AUTH_TOKEN, profile files,
		// federation or custom headers from the environment.
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(c.BaseURL),
		option.WithHTTPClient(c.HTTPClient),
		// The retry loop is ours (retry.go).
		option.WithMaxRetries(0),
		// An explicit timeout also stops the SDK from refusing
		// non-streaming requests with a large max_tokens.
		option.WithRequestTimeout(c.RequestTimeout),
		// Spans could carry request content to a global tracer.
		option.WithoutOpenTelemetry(),
	}
	if c.APIKey != "" {
		opts = append(opts, option.WithAPIKey(c.APIKey))
	}
	return &Model{cfg: c, msg: sdk.NewMessageService(opts...)}, nil
}

// ValidateOptions checks provider options without making a request, so a
// host can reject a bad agent definition before any model work.
func (m *Model) ValidateOptions(raw json.RawMessage) error {
	_, err := ParseOptions(raw)
	return err
}

// Generate sends req and returns the complete response. Errors: ErrOptions
// and ErrRequest before anything is sent; *APIError (ErrAPI) for an error
// status after the retries; ErrResponse for a response it cannot use,
// together with a Response carrying the usage when the server reported
// one (C34); the context's error, wrapped, when ctx ends. ErrOptions,
// ErrRequest, ErrResponse and an *APIError that was not retried match
// model.ErrPermanent: the same request cannot succeed later.
func (m *Model) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	o, err := ParseOptions(req.Options)
	if err != nil {
		return nil, err
	}
	p, err := m.params(req, o)
	if err != nil {
		return nil, err
	}
	return m.do(ctx, func(ctx context.Context, extra ...option.RequestOption) error {
		_, err := m.msg.New(ctx, p, extra...)
		return err
	}, parseMessage)
}

func (m *Model) scrub(s string) string {
	return provider.Scrub(m.cfg.APIKey, s)
}

// ownMeta reports whether a Meta key is this adapter's: the runtime's
// "cairn." keys and other adapters' keys are never read or sent.
func ownMeta(key string) bool { return strings.HasPrefix(key, "anthropic.") }

func setMeta(meta map[string][]byte, key string, v []byte) {
	if len(v) > 0 && ownMeta(key) {
		meta[key] = v
	}
}
