package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinels, matched with errors.Is.
var (
	// ErrConfig marks an invalid Config (New, Config.Validate).
	ErrConfig = errors.New("openai: invalid config")
	// ErrOptions marks invalid provider options in Request.Options: not a
	// JSON object, an unknown option (named in the error), a wrong type or
	// an out-of-range value.
	ErrOptions = errors.New("openai: invalid options")
	// ErrRequest marks a request the adapter cannot express on the wire,
	// such as a tool whose input schema is not JSON.
	ErrRequest = errors.New("openai: invalid request")
	// ErrAPI marks an error status from the server (an *APIError).
	ErrAPI = errors.New("openai: API error")
	// ErrResponse marks a response the adapter cannot use: invalid JSON, a
	// truncated body, a missing field, an unknown finish reason or status.
	// It is fatal for the attempt (C23) and never retried.
	ErrResponse = errors.New("openai: malformed response")
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
	var b strings.Builder
	fmt.Fprintf(&b, "openai: HTTP %d", e.StatusCode)
	if t := strings.Trim(e.Type+" "+e.Code, " "); t != "" {
		fmt.Fprintf(&b, " (%s)", t)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " [request %s]", e.RequestID)
	}
	return b.String()
}

// Is reports whether target is ErrAPI.
func (e *APIError) Is(target error) bool { return target == ErrAPI }

// Retryable reports whether the status is one the adapter retries: 429 and
// every 5xx.
func (e *APIError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// newAPIError builds the error of an error response. The SDK has already
// read the body and put it back on res.
func newAPIError(res *http.Response, scrub func(string) string) *APIError {
	e := &APIError{StatusCode: res.StatusCode, RequestID: res.Header.Get("x-request-id")}
	e.RetryAfter, _ = retryAfter(res.Header, time.Now())
	var body []byte
	if res.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	var detail struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	switch {
	case json.Unmarshal(body, &env) == nil && len(env.Error) > 0 && json.Unmarshal(env.Error, &detail) == nil:
		e.Message, e.Type = detail.Message, detail.Type
		if s, err := strconv.Unquote(string(detail.Code)); err == nil {
			e.Code = s
		} else if string(detail.Code) != "null" {
			e.Code = string(detail.Code)
		}
	case len(env.Error) > 0:
		// {"error": "text"}, as some compatible servers send.
		_ = json.Unmarshal(env.Error, &e.Message)
	default:
		e.Message = strings.TrimSpace(string(body))
	}
	e.Message = clip(scrub(e.Message), 1000)
	e.Type = clip(scrub(e.Type), 200)
	e.Code = clip(scrub(e.Code), 200)
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	return e
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// retryAfter reads the wait a response asks for: retry-after-ms
// (milliseconds, OpenAI's), then Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && s < 1e9 {
			return time.Duration(s * float64(time.Second)), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(0, t.Sub(now)), true
		}
	}
	return 0, false
}
