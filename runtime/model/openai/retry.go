package openai

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3/option"
)

// The exponential backoff used when the server gives no Retry-After.
const (
	backoffBase = 500 * time.Millisecond
	backoffMax  = 30 * time.Second
)

// sendFunc makes one attempt through the SDK. extra carries the options
// that hand the raw body and the *http.Response back to the retry loop.
type sendFunc func(ctx context.Context, extra ...option.RequestOption) error

// retryable wraps the error of an attempt that may be retried.
type retryable struct {
	err   error
	after time.Duration // the server's Retry-After
	asked bool          // whether the server sent one
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// do sends one request with the SDK's own retries off (the client is built
// with MaxRetries 0) and retries it here: 429, 5xx, connection errors and
// attempt timeouts, at most MaxRetries times and for at most RetryMaxWait
// of waiting in total, honouring Retry-After exactly. Other errors, and a
// cancelled ctx, end it at once. It returns the body of the 2xx response.
func (m *Model) do(ctx context.Context, send sendFunc) ([]byte, error) {
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		body, err := m.attempt(ctx, send)
		if err == nil {
			return body, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("openai: request abandoned: %w", ctx.Err())
		}
		var r *retryable
		if !errors.As(err, &r) {
			return nil, err
		}
		if attempt > m.cfg.MaxRetries {
			if m.cfg.MaxRetries == 0 {
				return nil, r.err
			}
			return nil, fmt.Errorf("openai: gave up after %d attempts: %w", attempt, r.err)
		}
		d := backoff(attempt, r.after, r.asked)
		if waited+d > m.cfg.RetryMaxWait {
			return nil, fmt.Errorf("openai: gave up after %d attempts: waiting %s more would exceed the %s retry budget: %w", attempt, d, m.cfg.RetryMaxWait, r.err)
		}
		if err := m.cfg.Sleep(ctx, d); err != nil {
			return nil, fmt.Errorf("openai: request abandoned while waiting to retry: %w", err)
		}
		waited += d
	}
}

// backoff is the wait before retry number attempt (1 for the first retry):
// the server's Retry-After when it sent one, exactly; otherwise an
// exponential backoff from 500ms, doubling up to 30s, with the upper half
// jittered so that clients that failed together do not retry together.
func backoff(attempt int, retryAfter time.Duration, asked bool) time.Duration {
	if asked {
		return retryAfter
	}
	d := backoffMax
	if attempt < 16 {
		d = min(backoffBase<<(attempt-1), backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// attempt makes one request. Its errors are *retryable when another
// attempt may succeed.
func (m *Model) attempt(ctx context.Context, send sendFunc) ([]byte, error) {
	actx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	defer cancel()
	var body []byte
	var res *http.Response
	err := send(actx, option.WithResponseBodyInto(&body), option.WithResponseInto(&res))
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	timedOut := actx.Err() != nil
	switch {
	case res == nil && err == nil:
		return nil, fmt.Errorf("%w: no response and no error", ErrResponse)
	case res == nil && timedOut:
		return nil, &retryable{err: fmt.Errorf("openai: attempt timed out after %s", m.cfg.RequestTimeout)}
	case res == nil:
		// A connection error: no status, nothing charged that we can see.
		return nil, &retryable{err: fmt.Errorf("openai: %s", m.scrub(err.Error()))}
	case res.StatusCode >= 400:
		apiErr := newAPIError(res, m.scrub)
		if apiErr.Retryable() && res.Header.Get("x-should-retry") != "false" {
			after, asked := retryAfter(res.Header, time.Now())
			return nil, &retryable{err: apiErr, after: after, asked: asked}
		}
		return nil, apiErr
	case err != nil && timedOut:
		return nil, &retryable{err: fmt.Errorf("openai: attempt timed out after %s while reading the response", m.cfg.RequestTimeout)}
	case err != nil:
		// A 2xx whose body could not be read: truncated or reset.
		return nil, fmt.Errorf("%w: reading the body of HTTP %d: %s", ErrResponse, res.StatusCode, m.scrub(err.Error()))
	case res.StatusCode < 200 || res.StatusCode > 299:
		return nil, fmt.Errorf("%w: unexpected HTTP %d", ErrResponse, res.StatusCode)
	}
	return body, nil
}
