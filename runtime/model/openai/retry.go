package openai

import (
	"context"
	"net/http"

	"github.com/openai/openai-go/v3/option"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

// sendFunc makes one attempt through the SDK. extra carries the options
// that hand the raw body and the *http.Response back to the retry loop.
type sendFunc func(ctx context.Context, extra ...option.RequestOption) error

// do sends one request through the shared retry loop (provider.Retrier.Do)
// with the SDK's own retries off (the client is built with MaxRetries 0, so
// every attempt is one HTTP request): 408, 409, 429, 5xx, x-should-retry:
// true, connection errors and attempt timeouts are retried, at most
// MaxRetries times and for at most RetryMaxWait of waiting in total,
// honouring Retry-After exactly. Other errors end it after one attempt,
// marked model.ErrPermanent; a cancelled ctx ends it at once. It returns
// parse's answer for the body of the 2xx response. Every failed attempt,
// and a body parse refuses, is reported to ctx's model.Trace.
func (m *Model) do(ctx context.Context, send sendFunc, parse func([]byte) (*model.Response, error)) (*model.Response, error) {
	r := provider.Retrier{
		Name:           "openai",
		Model:          m.cfg.Model,
		MaxRetries:     m.cfg.MaxRetries,
		RetryMaxWait:   m.cfg.RetryMaxWait,
		BackoffBase:    m.cfg.BackoffBase,
		BackoffMax:     m.cfg.BackoffMax,
		RequestTimeout: m.cfg.RequestTimeout,
		Sleep:          m.cfg.Sleep,
		Scrub:          m.scrub,
		ErrResponse:    ErrResponse,
		APIError: func(res *http.Response) provider.StatusError {
			return newAPIError(res, m.scrub)
		},
	}
	return provider.Parse(ctx, &r, func(ctx context.Context, body *[]byte, res **http.Response) error {
		return send(ctx, option.WithResponseBodyInto(body), option.WithResponseInto(res))
	}, parse)
}
