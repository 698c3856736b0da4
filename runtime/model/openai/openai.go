package openai

import (
	"context"
	"encoding/json"
	"strings"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

// Meta keys the adapter writes into Message.Meta and Part.Meta and reads
// back on later requests. Values are the provider's bytes: strings as
// their text, JSON values as the JSON the server sent.
const (
	MetaResponseID        = "openai.response_id"        // the chat completion or response ID
	MetaModel             = "openai.model"              // the model that answered
	MetaSystemFingerprint = "openai.system_fingerprint" // chat: the backend configuration
	MetaServiceTier       = "openai.service_tier"
	MetaFinishReason      = "openai.finish_reason" // chat: finish_reason; responses: status
	MetaIncompleteReason  = "openai.incomplete_reason"
	MetaUsage             = "openai.usage"             // the usage object, raw JSON
	MetaAPI               = "openai.api"               // "chat" or "responses"
	MetaRefusal           = "openai.refusal"           // Part.Meta of a refusal text part: the refusal
	MetaReasoningField    = "openai.reasoning_field"   // Part.Meta: reasoning_content or reasoning (chat)
	MetaReasoningDetails  = "openai.reasoning_details" // Message.Meta: OpenRouter's reasoning_details, raw JSON
	MetaItem              = "openai.item"              // Part.Meta (responses): the output item, raw JSON
	MetaItemID            = "openai.item_id"           // Part.Meta (responses): the output item's ID
	MetaPhase             = "openai.phase"             // Part.Meta (responses): a message item's phase
)

// RefusalPrefix starts the text part a refusal becomes: a refusal is an
// answer, not an error, and the loop nudges the model on.
const RefusalPrefix = "[refusal] "

// Model is a model.Model on the OpenAI API or a compatible server. It is
// safe for concurrent use.
type Model struct {
	cfg  Config
	chat oa.ChatCompletionService
	resp responses.ResponseService
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
		option.WithBaseURL(c.BaseURL),
		option.WithHTTPClient(c.HTTPClient),
		// The retry loop is ours (retry.go): the SDK's does not bound the
		// total wait and cannot be observed by tests.
		option.WithMaxRetries(0),
	}
	if c.APIKey != "" {
		opts = append(opts, option.WithAPIKey(c.APIKey))
	}
	if c.Organization != "" {
		opts = append(opts, option.WithOrganization(c.Organization))
	}
	if c.Project != "" {
		opts = append(opts, option.WithProject(c.Project))
	}
	// The services are built directly, not through openai.NewClient, so
	// that no other environment variable (OPENAI_CUSTOM_HEADERS,
	// OPENAI_ADMIN_KEY...) changes what is sent.
	return &Model{cfg: c, chat: oa.NewChatCompletionService(opts...), resp: responses.NewResponseService(opts...)}, nil
}

// API returns the API surface the model speaks.
func (m *Model) API() API { return m.cfg.API }

// ValidateOptions checks provider options without making a request, so a
// host can reject a bad agent definition before any model work.
func (m *Model) ValidateOptions(raw json.RawMessage) error {
	_, err := ParseOptions(raw, m.cfg.API)
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
	o, err := ParseOptions(req.Options, m.cfg.API)
	if err != nil {
		return nil, err
	}
	if m.cfg.API == APIResponses {
		return m.generateResponses(ctx, req, o)
	}
	return m.generateChat(ctx, req, o)
}

// scrub removes the API key from text that came from outside (an error
// body, a transport error), in case it was echoed.
func (m *Model) scrub(s string) string {
	return provider.Scrub(m.cfg.APIKey, s)
}

// ownMeta reports whether a Meta key is this adapter's: the runtime's
// "cairn." keys and other adapters' keys are never read or sent.
func ownMeta(key string) bool { return strings.HasPrefix(key, "openai.") }

// setMeta stores a non-empty value under key.
func setMeta(meta map[string][]byte, key string, v []byte) {
	if len(v) > 0 && ownMeta(key) {
		meta[key] = v
	}
}
