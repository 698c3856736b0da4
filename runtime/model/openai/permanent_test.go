package openai

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// The number of HTTP requests the server sees is the number of attempts
// the retry loop makes (the SDK's own retries are off), and an error no
// retry can fix is sent once and matches model.ErrPermanent. The server
// counts requests with an atomic counter; no test sleeps for real.
func TestOneRetryLayerAndPermanentErrors(t *testing.T) {
	const key = "sk-test-secret-key-0123456789" // newTestModel's key
	rateLimited := `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	serverError := `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`
	errBody := func(msg string) string {
		return `{"error":{"message":"` + msg + `","type":"invalid_request_error","param":null,"code":null}}`
	}
	noChoices := `{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,"model":"gpt-test","choices":[],
		"usage":{"prompt_tokens":9,"completion_tokens":0,"total_tokens":9}}`
	n500 := func(n int) []reply {
		out := make([]reply, n)
		for i := range out {
			out[i] = reply{status: 500, body: serverError}
		}
		return append(out, ok(chatTextBody))
	}
	tests := []struct {
		name       string
		replies    []reply
		maxRetries int // 0: the default (3)
		opts       string
		wantHits   int64
		wantErr    error // nil: success
		wantStatus int
		permanent  bool
		wantText   string
		wantSleeps int // how many injected waits
	}{
		{name: "(a) 429 then 200: two requests, one wait, success",
			replies:  []reply{{status: 429, header: map[string]string{"Retry-After": "1"}, body: rateLimited}, ok(chatTextBody)},
			wantHits: 2, wantSleeps: 1},
		{name: "(b) 401: one request, permanent, no key",
			replies:  []reply{{status: 401, body: errBody("Incorrect API key provided: " + key)}, ok(chatTextBody)},
			wantHits: 1, wantErr: ErrAPI, wantStatus: 401, permanent: true},
		{name: "(c) 500 x 5 with MaxRetries 2: three requests",
			replies: n500(5), maxRetries: 2,
			wantHits: 3, wantErr: ErrAPI, wantStatus: 500, wantText: "gave up after 3 attempts", wantSleeps: 2, permanent: true},
		{name: "(c) 500 x 5 with MaxRetries 4: five requests",
			replies: n500(5), maxRetries: 4,
			wantHits: 5, wantErr: ErrAPI, wantStatus: 500, wantText: "gave up after 5 attempts", wantSleeps: 4, permanent: true},
		{name: "(c) 500 with retries off: one request, permanent",
			replies: n500(3), maxRetries: -1,
			wantHits: 1, wantErr: ErrAPI, wantStatus: 500, permanent: true},
		{name: "(d) 200 with no choices: one request, permanent",
			replies:  []reply{ok(noChoices), ok(chatTextBody)},
			wantHits: 1, wantErr: ErrResponse, permanent: true, wantText: "no choices"},
		{name: "a 200 body that does not decode: one request, permanent",
			replies:  []reply{ok(`{"id": "chatcmpl-1", "choices": [`), ok(chatTextBody)},
			wantHits: 1, wantErr: ErrResponse, permanent: true},
		{name: "400: one request, permanent",
			replies:  []reply{{status: 400, body: errBody("Invalid 'messages'")}, ok(chatTextBody)},
			wantHits: 1, wantErr: ErrAPI, wantStatus: 400, permanent: true},
		{name: "403: one request, permanent",
			replies:  []reply{{status: 403, body: errBody("Country not supported")}, ok(chatTextBody)},
			wantHits: 1, wantErr: ErrAPI, wantStatus: 403, permanent: true},
		{name: "404: one request, permanent",
			replies:  []reply{{status: 404, body: errBody("The model does not exist")}, ok(chatTextBody)},
			wantHits: 1, wantErr: ErrAPI, wantStatus: 404, permanent: true},
		{name: "422: one request, permanent",
			replies:  []reply{{status: 422, body: errBody("Unprocessable")}, ok(chatTextBody)},
			wantHits: 1, wantErr: ErrAPI, wantStatus: 422, permanent: true},
		{name: "408 is retried",
			replies:  []reply{{status: 408, body: errBody("Request timeout")}, ok(chatTextBody)},
			wantHits: 2, wantSleeps: 1},
		{name: "409 is retried",
			replies:  []reply{{status: 409, body: errBody("Lock timeout")}, ok(chatTextBody)},
			wantHits: 2, wantSleeps: 1},
		{name: "x-should-retry true is honoured",
			replies:  []reply{{status: 400, header: map[string]string{"x-should-retry": "true"}, body: errBody("try again")}, ok(chatTextBody)},
			wantHits: 2, wantSleeps: 1},
		{name: "x-should-retry false on a 500: one request, permanent",
			replies:  []reply{{status: 500, header: map[string]string{"x-should-retry": "false"}, body: serverError}, ok(chatTextBody)},
			wantHits: 1, wantErr: ErrAPI, wantStatus: 500, permanent: true},
		{name: "a 429 beyond the wait budget: one request, permanent",
			replies:  []reply{{status: 429, header: map[string]string{"Retry-After": "600"}, body: rateLimited}, ok(chatTextBody)},
			wantHits: 1, wantErr: ErrAPI, wantStatus: 429, wantText: "retry budget", permanent: true},
		{name: "a dropped connection is retried",
			replies:  []reply{{drop: true}, ok(chatTextBody)},
			wantHits: 2, wantSleeps: 1},
		{name: "invalid options: no request, permanent",
			replies: []reply{ok(chatTextBody)}, opts: `{"temperature": 7}`,
			wantHits: 0, wantErr: ErrOptions, permanent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, tt.replies...)
			m, s := newTestModel(t, f, APIChat, func(c *Config) {
				if tt.maxRetries != 0 {
					c.MaxRetries = tt.maxRetries
				}
			})
			req := hi()
			if tt.opts != "" {
				req.Options = []byte(tt.opts)
			}
			resp, err := m.Generate(context.Background(), req)
			if n := f.hits.Load(); n != tt.wantHits {
				t.Fatalf("server saw %d requests, want %d (err %v)", n, tt.wantHits, err)
			}
			if n := len(s.all()); n != tt.wantSleeps {
				t.Fatalf("%d injected waits %v, want %d", n, s.all(), tt.wantSleeps)
			}
			checkOutcome(t, resp, err, tt.wantErr, tt.wantStatus, tt.permanent, tt.wantText, key)
		})
	}
}

func checkOutcome(t *testing.T, resp *model.Response, err, wantErr error, wantStatus int, permanent bool, wantText, key string) {
	t.Helper()
	if wantErr == nil {
		if err != nil || resp == nil || resp.Message.Text() == "" {
			t.Fatalf("Generate = %+v, %v; want success", resp, err)
		}
		return
	}
	if !errors.Is(err, wantErr) {
		t.Fatalf("err = %v, want %v", err, wantErr)
	}
	if got := errors.Is(err, model.ErrPermanent); got != permanent || model.IsPermanent(err) != permanent {
		t.Fatalf("err = %v: permanent %v, want %v", err, got, permanent)
	}
	if wantStatus != 0 {
		var ae *APIError
		if !errors.As(err, &ae) || ae.StatusCode != wantStatus {
			t.Fatalf("err = %v, want an *APIError with status %d", err, wantStatus)
		}
	}
	if !strings.Contains(err.Error(), wantText) {
		t.Fatalf("err = %q, want it to say %q", err, wantText)
	}
	if strings.Contains(err.Error(), key) {
		t.Fatalf("err = %q shows the API key", err)
	}
}

// A cancelled context is not a permanent error: the request may succeed
// when tried again.
func TestCancelledIsNotPermanent(t *testing.T) {
	f := newFakeServer(t, reply{hang: true}, ok(chatTextBody))
	m, _ := newTestModel(t, f, APIChat)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.arrived
		cancel()
	}()
	_, err := m.Generate(ctx, hi())
	if !errors.Is(err, context.Canceled) || errors.Is(err, model.ErrPermanent) {
		t.Fatalf("err = %v, want context.Canceled and not permanent", err)
	}
	if n := f.hits.Load(); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

// The Responses API's malformed response is permanent too.
func TestResponsesMalformedIsPermanent(t *testing.T) {
	f := newFakeServer(t, ok(`{"id":"resp_1","object":"response"`), ok(respTextBody))
	m, s := newTestModel(t, f, APIResponses)
	_, err := m.Generate(context.Background(), hi())
	if !errors.Is(err, ErrResponse) || !errors.Is(err, model.ErrPermanent) || f.hits.Load() != 1 || len(s.all()) != 0 {
		t.Fatalf("err = %v after %d requests and waits %v; want a permanent ErrResponse after 1", err, f.hits.Load(), s.all())
	}
}
