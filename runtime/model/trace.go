package model

import (
	"context"
	"time"
)

// Failure is one failed request to a provider: one attempt of an adapter's
// retry loop that got no usable answer. The host records it with the step
// it belongs to and shows it while the loop backs off, so an operator sees
// every request a step cost, not only the last.
type Failure struct {
	// Provider and Model name where the request went ("openai",
	// "gpt-4.1-mini").
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	// Attempt counts the step's requests, from 1.
	Attempt int `json:"attempt"`
	// Status is the HTTP status of the answer; 0 when there was none (a
	// connection error, an attempt that timed out).
	Status int `json:"status,omitempty"`
	// Class is what went wrong: FailureStatus, FailureConnection,
	// FailureTimeout or FailureMalformed.
	Class string `json:"class"`
	// Error is the adapter's error text, with the API key removed.
	Error string `json:"error"`
	// Retry reports whether the loop tries again; RetryIn is the wait
	// before it does. A failure that is not retried ends the step.
	Retry   bool          `json:"retry"`
	RetryIn time.Duration `json:"retry_in,omitempty"`
	// At is when the attempt failed.
	At time.Time `json:"at"`
}

// The classes of a Failure.
const (
	FailureStatus     = "status"     // an error status (>= 400)
	FailureConnection = "connection" // no answer: refused, reset, DNS
	FailureTimeout    = "timeout"    // the attempt's timeout passed
	FailureMalformed  = "malformed"  // an answer that could not be read
)

// Trace is a set of hooks an adapter calls while it serves one request,
// as net/http/httptrace's ClientTrace is for an HTTP request: the host
// learns what the request cost on the way, without the adapter knowing
// who listens. Nil hooks are skipped.
type Trace struct {
	// AttemptFailed is called for each failed attempt, before the loop
	// waits to retry it or gives up. It must not block.
	AttemptFailed func(Failure)
}

type traceKey struct{}

// WithTrace returns a context whose requests report to t, and then to
// the trace ctx already had: a wrapper (the node's metrics) and the loop
// can both listen. A nil t is ctx.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	if t == nil {
		return ctx
	}
	if outer := ContextTrace(ctx); outer != nil {
		inner := t
		t = &Trace{AttemptFailed: func(f Failure) {
			if inner.AttemptFailed != nil {
				inner.AttemptFailed(f)
			}
			if outer.AttemptFailed != nil {
				outer.AttemptFailed(f)
			}
		}}
	}
	return context.WithValue(ctx, traceKey{}, t)
}

// ContextTrace returns the trace of ctx, or nil.
func ContextTrace(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}

// ReportFailure calls the AttemptFailed hook of ctx's trace, if any.
func ReportFailure(ctx context.Context, f Failure) {
	if t := ContextTrace(ctx); t != nil && t.AttemptFailed != nil {
		t.AttemptFailed(f)
	}
}
