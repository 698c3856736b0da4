package provider

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrorBody is what an error response says, with the API key removed and
// each field clipped.
type ErrorBody struct {
	// Message is the provider's message, at most 1000 bytes; the HTTP
	// status text when the body had none.
	Message string
	// Type and Code are the provider's error type and code, when the body
	// had them, at most 200 bytes each.
	Type string
	Code string
	// RetryAfter is the wait the server asked for; zero when none.
	RetryAfter time.Duration
}

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// ReadErrorBody reads the body of an error response. The SDK has already
// read the body and put it back on res. It understands
// {"error": {"message", "type", "code"}} (both providers' shape, with any
// other fields), {"error": "text"} (some compatible servers) and plain
// text.
func ReadErrorBody(res *http.Response, scrub func(string) string) ErrorBody {
	var e ErrorBody
	e.RetryAfter, _ = RetryAfter(res.Header, time.Now())
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
	e.Message = Clip(scrub(e.Message), 1000)
	e.Type = Clip(scrub(e.Type), 200)
	e.Code = Clip(scrub(e.Code), 200)
	if e.Message == "" {
		e.Message = http.StatusText(res.StatusCode)
	}
	return e
}

// FormatAPIError is the text of an adapter's APIError:
// "name: HTTP status (kind): message [request id]", leaving out the
// empty parts.
func FormatAPIError(name string, status int, kind, message, requestID string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: HTTP %d", name, status)
	if kind != "" {
		fmt.Fprintf(&b, " (%s)", kind)
	}
	if message != "" {
		fmt.Fprintf(&b, ": %s", message)
	}
	if requestID != "" {
		fmt.Fprintf(&b, " [request %s]", requestID)
	}
	return b.String()
}

// RetryableStatus reports whether an error status is one the adapters
// retry, the statuses both providers' SDKs retry: 408 (request timeout),
// 409 (conflict, e.g. a lock timeout), 429 and every 5xx (Anthropic's 529
// included). Every other error status (400, 401, 403, 404, 422...) is
// refused again however often it is sent.
func RetryableStatus(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return true
	}
	return status >= 500
}

// Clip cuts s to at most n bytes on a rune boundary.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// Scrub replaces every occurrence of key in s; an empty key leaves s as
// it is.
func Scrub(key, s string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}

// RetryAfter reads the wait a response asks for: retry-after-ms
// (milliseconds, OpenAI's and some gateways'), then Retry-After (seconds
// or an HTTP date).
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
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
