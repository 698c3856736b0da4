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

// The exponential backoff used when the server gives no Retry-After and
// the Retrier sets none of its own.
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
	// Name prefixes the loop's own errors ("openai: gave up ...") and is
	// the provider of the failures it reports; Model is their model.
	Name         string
	Model        string
	MaxRetries   int
	RetryMaxWait time.Duration
	// BackoffBase and BackoffMax shape the wait when the server asks for
	// none (zero: the package's BackoffBase and BackoffMax).
	BackoffBase, BackoffMax time.Duration
	RequestTimeout          time.Duration
	Sleep                   func(ctx context.Context, d time.Duration) error
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

// failed is what went wrong in one attempt, for its model.Failure.
type failed struct {
	class  string
	status int
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
// response. Running out of retries is permanent too: this loop is the only
// one, its limits are the agent's retry policy, and a run that retried the
// step again would send the provider more requests than the policy allows.
// A cancelled ctx ends it at once, and is not permanent. Every failed
// attempt is reported to ctx's model.Trace before the loop waits or gives
// up. It returns the body of the 2xx response.
func (r *Retrier) Do(ctx context.Context, send SendFunc) ([]byte, error) {
	body, _, err := r.do(ctx, send)
	return body, err
}

// Parse is Do followed by parse of the 2xx body; a body parse refuses
// (it wraps the adapter's ErrResponse) is reported as a malformed answer
// of the last attempt. parse may return a value with its error (the
// usage of a response that is otherwise unusable): both are returned.
func Parse[T any](ctx context.Context, r *Retrier, send SendFunc, parse func([]byte) (T, error)) (T, error) {
	body, attempts, err := r.do(ctx, send)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := parse(body)
	if err != nil && errors.Is(err, r.ErrResponse) {
		r.report(ctx, attempts, failed{class: model.FailureMalformed, status: http.StatusOK}, err, 0, false)
	}
	return v, err
}

func (r *Retrier) do(ctx context.Context, send SendFunc) ([]byte, int, error) {
	var waited time.Duration
	for attempt := 1; ; attempt++ {
		body, f, err := r.attempt(ctx, send)
		if err == nil {
			return body, attempt, nil
		}
		if ctx.Err() != nil {
			return nil, attempt, fmt.Errorf("%s: request abandoned: %w", r.Name, ctx.Err())
		}
		var re *retryable
		if !errors.As(err, &re) {
			r.report(ctx, attempt, f, err, 0, false)
			return nil, attempt, model.Permanent(err)
		}
		if attempt > r.MaxRetries {
			r.report(ctx, attempt, f, re.err, 0, false)
			if r.MaxRetries == 0 {
				return nil, attempt, model.Permanent(re.err)
			}
			return nil, attempt, model.Permanent(fmt.Errorf("%s: gave up after %d attempts: %w", r.Name, attempt, re.err))
		}
		d := r.backoff(attempt, re.after, re.asked)
		if waited+d > r.RetryMaxWait {
			r.report(ctx, attempt, f, re.err, 0, false)
			return nil, attempt, model.Permanent(fmt.Errorf("%s: gave up after %d attempts: waiting %s more would exceed the %s retry budget: %w", r.Name, attempt, d, r.RetryMaxWait, re.err))
		}
		r.report(ctx, attempt, f, re.err, d, true)
		if err := r.Sleep(ctx, d); err != nil {
			return nil, attempt, fmt.Errorf("%s: request abandoned while waiting to retry: %w", r.Name, err)
		}
		waited += d
	}
}

// report tells ctx's model.Trace of a failed attempt.
func (r *Retrier) report(ctx context.Context, attempt int, f failed, err error, wait time.Duration, retry bool) {
	model.ReportFailure(ctx, model.Failure{Provider: r.Name, Model: r.Model, Attempt: attempt, Status: f.status, Class: f.class,
		Error: err.Error(), Retry: retry, RetryIn: wait, At: time.Now()})
}

// backoff is Backoff with the Retrier's own base and cap.
func (r *Retrier) backoff(attempt int, retryAfter time.Duration, asked bool) time.Duration {
	if asked {
		return retryAfter
	}
	base, most := r.BackoffBase, r.BackoffMax
	if base <= 0 {
		base = BackoffBase
	}
	if most <= 0 {
		most = BackoffMax
	}
	return jittered(attempt, base, most)
}

// Backoff is the wait before retry number attempt (1 for the first retry):
// the server's Retry-After when it sent one, exactly; otherwise an
// exponential backoff from 500ms, doubling up to 30s, with the upper half
// jittered so that clients that failed together do not retry together.
func Backoff(attempt int, retryAfter time.Duration, asked bool) time.Duration {
	if asked {
		return retryAfter
	}
	return jittered(attempt, BackoffBase, BackoffMax)
}

// jittered is base doubled per retry up to most, its upper half jittered.
func jittered(attempt int, base, most time.Duration) time.Duration {
	d := most
	if shift := attempt - 1; shift < 63 && base <= most>>shift {
		d = base << shift
	}
	return d/2 + rand.N(d/2+1)
}

// attempt makes one request. Its errors are *retryable when another
// attempt may succeed; f says what failed.
func (r *Retrier) attempt(ctx context.Context, send SendFunc) (body []byte, f failed, err error) {
	actx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
	defer cancel()
	var res *http.Response
	err = send(actx, &body, &res)
	if ctx.Err() != nil {
		return nil, f, ctx.Err()
	}
	timedOut := actx.Err() != nil
	if res != nil {
		f.status = res.StatusCode
	}
	switch {
	case res == nil && err == nil:
		return nil, failed{class: model.FailureMalformed}, fmt.Errorf("%w: no response and no error", r.ErrResponse)
	case res == nil && timedOut:
		return nil, failed{class: model.FailureTimeout}, &retryable{err: fmt.Errorf("%s: attempt timed out after %s", r.Name, r.RequestTimeout)}
	case res == nil:
		// A connection error: no status, nothing charged that we can see.
		return nil, failed{class: model.FailureConnection}, &retryable{err: fmt.Errorf("%s: %s", r.Name, r.Scrub(err.Error()))}
	case res.StatusCode >= 400:
		f.class = model.FailureStatus
		apiErr := r.APIError(res)
		if shouldRetry(apiErr, res.Header) {
			after, asked := RetryAfter(res.Header, time.Now())
			return nil, f, &retryable{err: apiErr, after: after, asked: asked}
		}
		return nil, f, apiErr
	case err != nil && timedOut:
		f.class = model.FailureTimeout
		return nil, f, &retryable{err: fmt.Errorf("%s: attempt timed out after %s while reading the response", r.Name, r.RequestTimeout)}
	case err != nil:
		// A 2xx whose body could not be read: truncated or reset.
		f.class = model.FailureMalformed
		return nil, f, fmt.Errorf("%w: reading the body of HTTP %d: %s", r.ErrResponse, res.StatusCode, r.Scrub(err.Error()))
	case res.StatusCode < 200 || res.StatusCode > 299:
		f.class = model.FailureMalformed
		return nil, f, fmt.Errorf("%w: unexpected HTTP %d", r.ErrResponse, res.StatusCode)
	}
	return body, f, nil
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
