package openai

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

// Sentinels, matched with errors.Is. ErrOptions, ErrRequest and
// ErrResponse also match model.ErrPermanent, as does an *APIError the
// adapter did not retry (400, 401, 403, 404, 422...): sending the same
// request again cannot succeed. An *APIError for a retryable status (408,
// 409, 429, 5xx) whose retries ran out is returned wrapped in an error
// that matches model.ErrPermanent too: the retry loop is the only one, and
// the agent's retry policy (Config.MaxRetries, RetryMaxWait) is spent.
var (
	// ErrConfig marks an invalid Config (New, Config.Validate).
	ErrConfig = errors.New("openai: invalid config")
	// ErrOptions marks invalid provider options in Request.Options: not a
	// JSON object, an unknown option (named in the error), a wrong type or
	// an out-of-range value.
	ErrOptions = errors.New("openai: invalid options")
	// ErrRequest marks a request the adapter cannot express on the wire,
	// such as a tool whose input schema is not JSON.
	ErrRequest = model.Permanent(errors.New("openai: invalid request"))
	// ErrAPI marks an error status from the server (an *APIError).
	ErrAPI = errors.New("openai: API error")
	// ErrResponse marks a response the adapter cannot use: invalid JSON, a
	// truncated body, a missing field, an unknown finish reason or status.
	// It is fatal for the attempt (C23), never retried, and permanent.
	ErrResponse = model.Permanent(errors.New("openai: malformed response"))
)

// APIError is an error status returned by the server. It matches ErrAPI.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Type and Code are the provider's error type and code, when the body
	// had them ("invalid_request_error", "rate_limit_exceeded").
	Type string
	Code string
	// Message is the provider's message, cut to 1000 bytes, with the API
	// key removed if the server echoed it.
	Message string
	// RequestID is the x-request-id header, for the provider's support.
	RequestID string
	// RetryAfter is the wait the server asked for (Retry-After,
	// retry-after-ms); zero when it asked for none.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return provider.FormatAPIError("openai", e.StatusCode, strings.Trim(e.Type+" "+e.Code, " "), e.Message, e.RequestID)
}

// Is reports whether target is ErrAPI.
func (e *APIError) Is(target error) bool { return target == ErrAPI }

// Retryable reports whether the status is one the adapter retries: 408,
// 409, 429 and
// every 5xx.
func (e *APIError) Retryable() bool {
	return provider.RetryableStatus(e.StatusCode)
}

// newAPIError builds the error of an error response. The SDK has already
// read the body and put it back on res.
func newAPIError(res *http.Response, scrub func(string) string) *APIError {
	b := provider.ReadErrorBody(res, scrub)
	return &APIError{StatusCode: res.StatusCode, Type: b.Type, Code: b.Code, Message: b.Message,
		RequestID: res.Header.Get("x-request-id"), RetryAfter: b.RetryAfter}
}
