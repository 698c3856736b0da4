package openai

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

func hi() model.Request {
	return model.Request{Messages: []model.Message{model.TextMessage("u", model.RoleUser, "hi")}}
}

func TestRetries(t *testing.T) {
	rateLimited := `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	serverError := `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`
	tests := []struct {
		name       string
		replies    []reply
		mut        func(*Config)
		wantErr    error // nil: success
		wantStatus int   // of the *APIError, when wantErr is ErrAPI
		wantReqs   int   // requests the server saw
		wantSleeps []time.Duration
		// sleepRange checks each wait of a backoff without Retry-After.
		sleepRange [][2]time.Duration
	}{
		{
			name: "429 with Retry-After seconds, then success",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "3"}, body: rateLimited},
				ok(chatTextBody)},
			wantReqs: 2, wantSleeps: []time.Duration{3 * time.Second},
		},
		{
			name: "429 with retry-after-ms wins over Retry-After",
			replies: []reply{{status: 429, header: map[string]string{"retry-after-ms": "1500", "Retry-After": "2"}, body: rateLimited},
				ok(chatTextBody)},
			wantReqs: 2, wantSleeps: []time.Duration{1500 * time.Millisecond},
		},
		{
			name: "429 with an HTTP-date Retry-After in the past: no wait",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, body: rateLimited},
				ok(chatTextBody)},
			wantReqs: 2, wantSleeps: []time.Duration{0},
		},
		{
			name:       "500 then success: exponential backoff",
			replies:    []reply{{status: 500, body: serverError}, {status: 502, body: "<html>bad gateway</html>"}, ok(chatTextBody)},
			wantReqs:   3,
			sleepRange: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}, {500 * time.Millisecond, time.Second}},
		},
		{
			name:    "400 is not retried",
			replies: []reply{{status: 400, body: `{"error":{"message":"Invalid 'messages'","type":"invalid_request_error","param":"messages","code":null}}`}},
			wantErr: ErrAPI, wantStatus: 400, wantReqs: 1,
		},
		{
			name:    "401 is not retried",
			replies: []reply{{status: 401, body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}},
			wantErr: ErrAPI, wantStatus: 401, wantReqs: 1,
		},
		{
			name: "retries are bounded by count",
			replies: []reply{{status: 503, body: serverError}, {status: 503, body: serverError},
				{status: 503, body: serverError}, {status: 503, body: serverError}, ok(chatTextBody)},
			wantErr: ErrAPI, wantStatus: 503, wantReqs: 4,
			sleepRange: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}, {500 * time.Millisecond, time.Second}, {time.Second, 2 * time.Second}},
		},
		{
			name:    "a Retry-After beyond the wait budget ends the retries",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "600"}, body: rateLimited}, ok(chatTextBody)},
			wantErr: ErrAPI, wantStatus: 429, wantReqs: 1,
		},
		{
			name: "the wait budget is cumulative",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "40"}, body: rateLimited},
				{status: 429, header: map[string]string{"Retry-After": "40"}, body: rateLimited}, ok(chatTextBody)},
			mut:     func(c *Config) { c.RetryMaxWait = time.Minute },
			wantErr: ErrAPI, wantStatus: 429, wantReqs: 2, wantSleeps: []time.Duration{40 * time.Second},
		},
		{
			name:    "x-should-retry false is honoured",
			replies: []reply{{status: 500, header: map[string]string{"x-should-retry": "false"}, body: serverError}, ok(chatTextBody)},
			wantErr: ErrAPI, wantStatus: 500, wantReqs: 1,
		},
		{
			name:    "retries disabled",
			replies: []reply{{status: 500, body: serverError}, ok(chatTextBody)},
			mut:     func(c *Config) { c.MaxRetries = -1 },
			wantErr: ErrAPI, wantStatus: 500, wantReqs: 1,
		},
		{
			name:       "a dropped connection is retried",
			replies:    []reply{{drop: true}, ok(chatTextBody)},
			wantReqs:   2,
			sleepRange: [][2]time.Duration{{250 * time.Millisecond, 500 * time.Millisecond}},
		},
		{
			name:    "a truncated body is a malformed response, not retried",
			replies: []reply{{status: 200, body: chatTextBody[:60], truncate: true}, ok(chatTextBody)},
			wantErr: ErrResponse, wantReqs: 1,
		},
		{
			name:    "invalid JSON is a malformed response, not retried",
			replies: []reply{ok(`{"id": "chatcmpl-1", "choices": [{"index": 0,`), ok(chatTextBody)},
			wantErr: ErrResponse, wantReqs: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, tt.replies...)
			mut := tt.mut
			if mut == nil {
				mut = func(*Config) {}
			}
			m, s := newTestModel(t, f, APIChat, mut)
			resp, err := m.Generate(context.Background(), hi())
			if n := len(f.requests()); n != tt.wantReqs {
				t.Fatalf("server saw %d requests, want %d (err %v)", n, tt.wantReqs, err)
			}
			if tt.wantErr == nil {
				if err != nil || resp == nil || resp.Message.Text() == "" {
					t.Fatalf("Generate = %+v, %v; want success", resp, err)
				}
			} else {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantStatus != 0 {
					var ae *APIError
					if !errors.As(err, &ae) || ae.StatusCode != tt.wantStatus {
						t.Fatalf("err = %v, want an *APIError with status %d", err, tt.wantStatus)
					}
				}
			}
			got := s.all()
			if tt.wantSleeps != nil {
				if len(got) != len(tt.wantSleeps) {
					t.Fatalf("waits %v, want %v", got, tt.wantSleeps)
				}
				for i := range got {
					if got[i] != tt.wantSleeps[i] {
						t.Fatalf("waits %v, want %v", got, tt.wantSleeps)
					}
				}
			}
			if tt.sleepRange != nil {
				if len(got) != len(tt.sleepRange) {
					t.Fatalf("waits %v, want %d in %v", got, len(tt.sleepRange), tt.sleepRange)
				}
				for i, r := range tt.sleepRange {
					if got[i] < r[0] || got[i] > r[1] {
						t.Fatalf("wait %d = %s, want in [%s, %s]", i, got[i], r[0], r[1])
					}
				}
			}
			if tt.wantSleeps == nil && tt.sleepRange == nil && len(got) != 0 {
				t.Fatalf("waited %v, want no wait", got)
			}
		})
	}
}

func TestAPIErrorFields(t *testing.T) {
	f := newFakeServer(t, reply{status: 429, header: map[string]string{"Retry-After": "1", "x-request-id": "req_123"},
		body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`})
	m, _ := newTestModel(t, f, APIChat, func(c *Config) { c.MaxRetries = -1 })
	_, err := m.Generate(context.Background(), hi())
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want *APIError", err)
	}
	want := APIError{StatusCode: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "Rate limit reached", RequestID: "req_123", RetryAfter: time.Second}
	if *ae != want {
		t.Fatalf("APIError %+v, want %+v", *ae, want)
	}
	if !ae.Retryable() {
		t.Fatal("429 must be retryable")
	}
}

// The API key never appears in an error, even when the server echoes it.
func TestKeyNeverInErrors(t *testing.T) {
	const key = "sk-test-secret-key-0123456789"
	replies := []reply{
		{status: 401, body: `{"error":{"message":"Incorrect API key provided: ` + key + `.","type":"invalid_request_error","code":"invalid_api_key"}}`},
		{status: 400, body: `plain text error mentioning ` + key},
		{status: 500, header: map[string]string{"x-should-retry": "false"}, body: `{"error":"` + key + `"}`},
	}
	for i, rp := range replies {
		f := newFakeServer(t, rp)
		m, _ := newTestModel(t, f, APIChat)
		_, err := m.Generate(context.Background(), hi())
		if err == nil || strings.Contains(err.Error(), key) {
			t.Fatalf("case %d: err = %v", i, err)
		}
		var ae *APIError
		if !errors.As(err, &ae) || strings.Contains(ae.Message+ae.Code+ae.Type, key) {
			t.Fatalf("case %d: APIError %+v", i, ae)
		}
	}
	cfg := Config{Model: "m", APIKey: key}
	for _, s := range []string{cfg.String(), cfg.GoString()} {
		if strings.Contains(s, key) {
			t.Fatalf("Config prints its key: %s", s)
		}
	}
}

// Cancelling the context ends the request at once: no retry, no wait, and
// the error says why.
func TestContextCancelledMidRequest(t *testing.T) {
	f := newFakeServer(t, reply{hang: true}, ok(chatTextBody))
	m, s := newTestModel(t, f, APIChat)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.arrived // the request is in flight
		cancel()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := m.Generate(ctx, hi())
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Generate did not return after cancellation")
	}
	if n := len(f.requests()); n != 1 || len(s.all()) != 0 {
		t.Fatalf("%d requests and waits %v after cancellation, want 1 and none", n, s.all())
	}
}

// A cancellation while waiting to retry ends the wait.
func TestContextCancelledWhileWaiting(t *testing.T) {
	f := newFakeServer(t, reply{status: 503, body: `{}`}, ok(chatTextBody))
	ctx, cancel := context.WithCancel(context.Background())
	m, _ := newTestModel(t, f, APIChat, func(c *Config) {
		c.Sleep = func(ctx context.Context, d time.Duration) error { cancel(); return provider.Sleep(ctx, d) }
	})
	_, err := m.Generate(ctx, hi())
	if !errors.Is(err, context.Canceled) || len(f.requests()) != 1 {
		t.Fatalf("err = %v after %d requests", err, len(f.requests()))
	}
}

// An attempt that takes longer than RequestTimeout is abandoned and retried.
func TestAttemptTimeout(t *testing.T) {
	f := newFakeServer(t, reply{hang: true}, ok(chatTextBody))
	m, s := newTestModel(t, f, APIChat, func(c *Config) { c.RequestTimeout = 50 * time.Millisecond })
	resp, err := m.Generate(context.Background(), hi())
	if err != nil || resp.Message.Text() == "" {
		t.Fatalf("Generate = %+v, %v", resp, err)
	}
	if len(f.requests()) != 2 || len(s.all()) != 1 {
		t.Fatalf("%d requests, waits %v; want 2 and one wait", len(f.requests()), s.all())
	}
}
