package provider

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
)

// The exponential backoff used when the server gives no Retry-After.
const (
	BackoffBase = 500 * time.Millisecond
	BackoffMax  = 30 * time.Second
)

// SendFunc makes one attempt through the adapter's SDK. It must have the
// SDK store the raw body of the response in *body and the response in
// *res (option.WithResponseBodyInto, option.WithResponseInto).
type SendFunc func(ctx context.Context, body *[]byte, res **http.Response) error

// Retrier is the retry loop of one adapter, built from its resolved
// Config.
type Retrier struct {
	// Name prefixes the loop's own errors ("openai: gave up ...").
	Name           string
	MaxRetries     int
	RetryMaxWait   time.Duration
	RequestTimeout time.Duration
	Sleep          func(ctx context.Context, d time.Duration) error
	// Scrub removes the API key from text that came from outside.
	Scrub func(string) string
	// ErrResponse is the adapter's malformed-response sentinel.
	ErrResponse error
	// APIError builds the adapter's error for an error status (>= 400).
	APIError func(res *http.Response) StatusError
}

// StatusError is an adapter's error for an error status.
type StatusError interface {
	error
	// Retryable reports whether the status is one the loop retries.
	Retryable() bool
}

// retryable wraps the error of an attempt that may be retried.
type retryable struct {
	err   error
	after time.Duration // the server's Retry-After
	asked bool          // whether the server sent one
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// Do sends one request with the SDK's own retries off (the client is built
// with MaxRetries 0, so every attempt is one HTTP request) and retries it
// here: the statuses the provider's StatusError calls retryable (408, 409,
// 429, 5xx for both adapters) or whose response says x-should-retry: true,
// connection errors and attempt timeouts, at most MaxRetries times and for
// at most RetryMaxWait of waiting in total, honouring Retry-After exactly.
// Any other error ends it after one attempt and is returned marked
// model.ErrPermanent: a 4xx the provider will refuse again, a malformed
// response. A cancelled ctx ends it at once, and neither that nor running
// out of retries is permanent. It returns the body of the 2xx response.
func (r *Retrier) Do(ctx context.Context, send SendFunc) ([]byte, error) {
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		body, err := r.attempt(ctx, send)
		if err == nil {
			return body, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: request abandoned: %w", r.Name, ctx.Err())
		}
		var re *retryable
		if !errors.As(err, &re) {
			return nil, model.Permanent(err)
		}
		if attempt > r.MaxRetries {
			if r.MaxRetries == 0 {
				return nil, re.err
			}
			return nil, fmt.Errorf("%s: gave up after %d attempts: %w", r.Name, attempt, re.err)
		}
		d := Backoff(attempt, re.after, re.asked)
		if waited+d > r.RetryMaxWait {
			return nil, fmt.Errorf("%s: gave up after %d attempts: waiting %s more would exceed the %s retry budget: %w", r.Name, attempt, d, r.RetryMaxWait, re.err)
		}
		if err := r.Sleep(ctx, d); err != nil {
			return nil, fmt.Errorf("%s: request abandoned while waiting to retry: %w", r.Name, err)
		}
		waited += d
	}
}

// Backoff is the wait before retry number attempt (1 for the first retry):
// the server's Retry-After when it sent one, exactly; otherwise an
// exponential backoff from 500ms, doubling up to 30s, with the upper half
// jittered so that clients that failed together do not retry together.
func Backoff(attempt int, retryAfter time.Duration, asked bool) time.Duration {
	if asked {
		return retryAfter
	}
	d := BackoffMax
	if attempt < 16 {
		d = min(BackoffBase<<(attempt-1), BackoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// attempt makes one request. Its errors are *retryable when another
// attempt may succeed.
func (r *Retrier) attempt(ctx context.Context, send SendFunc) ([]byte, error) {
	actx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
	defer cancel()
	var body []byte
	var res *http.Response
	err := send(actx, &body, &res)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	timedOut := actx.Err() != nil
	switch {
	case res == nil && err == nil:
		return nil, fmt.Errorf("%w: no response and no error", r.ErrResponse)
	case res == nil && timedOut:
		return nil, &retryable{err: fmt.Errorf("%s: attempt timed out after %s", r.Name, r.RequestTimeout)}
	case res == nil:
		// A connection error: no status, nothing charged that we can see.
		return nil, &retryable{err: fmt.Errorf("%s: %s", r.Name, r.Scrub(err.Error()))}
	case res.StatusCode >= 400:
		apiErr := r.APIError(res)
		if shouldRetry(apiErr, res.Header) {
			after, asked := RetryAfter(res.Header, time.Now())
			return nil, &retryable{err: apiErr, after: after, asked: asked}
		}
		return nil, apiErr
	case err != nil && timedOut:
		return nil, &retryable{err: fmt.Errorf("%s: attempt timed out after %s while reading the response", r.Name, r.RequestTimeout)}
	case err != nil:
		// A 2xx whose body could not be read: truncated or reset.
		return nil, fmt.Errorf("%w: reading the body of HTTP %d: %s", r.ErrResponse, res.StatusCode, r.Scrub(err.Error()))
	case res.StatusCode < 200 || res.StatusCode > 299:
		return nil, fmt.Errorf("%w: unexpected HTTP %d", r.ErrResponse, res.StatusCode)
	}
	return body, nil
}

// shouldRetry reports whether an error status is retried: as the server
// says in x-should-retry ("true" or "false", as the SDKs read it), else
// as the provider's StatusError says.
func shouldRetry(apiErr StatusError, h http.Header) bool {
	switch h.Get("x-should-retry") {
	case "true":
		return true
	case "false":
		return false
	}
	return apiErr.Retryable()
}

// Sleep waits for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
