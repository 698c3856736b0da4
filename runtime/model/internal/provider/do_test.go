package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testKey is in every request's path, so that transport errors (which quote
// the URL) carry it, and some error bodies echo it: no error may show it.
const testKey = "sk-test-secret-0123456789"

var errTestResponse = errors.New("test: malformed response")

// step is one scripted answer of the test server.
type step struct {
	status int
	header map[string]string
	body   string
	drop   bool // close the connection without a response
	short  bool // announce a longer body than is sent
	cancel bool // cancel the caller's context before answering
}

func okStep() step { return step{status: 200, body: `{"ok":true}`} }

// statusError is the test provider's error for an error status; which
// statuses it retries is the table's choice, as it is each adapter's.
type statusError struct {
	status    int
	message   string
	retryable bool
}

func (e *statusError) Error() string   { return fmt.Sprintf("test: HTTP %d: %s", e.status, e.message) }
func (e *statusError) Retryable() bool { return e.retryable }

// script serves steps in order and counts the requests it saw.
type script struct {
	t      *testing.T
	steps  []step
	n      atomic.Int32
	cancel context.CancelFunc
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := int(s.n.Add(1)) - 1
	if i >= len(s.steps) {
		s.t.Errorf("request %d, only %d scripted", i+1, len(s.steps))
		w.WriteHeader(http.StatusTeapot)
		return
	}
	st := s.steps[i]
	switch {
	case st.drop:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			s.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
		return
	case st.cancel:
		s.cancel()
	}
	for k, v := range st.header {
		w.Header().Set(k, v)
	}
	if st.short {
		w.Header().Set("Content-Length", strconv.Itoa(len(st.body)+100))
	}
	w.WriteHeader(st.status)
	io.WriteString(w, st.body)
}

// sendTo is a SendFunc doing what the SDKs do with the options the
// adapters pass: *res is set as soon as there is a response, the body is
// kept in *body and put back on res for the error parser, and an error
// status is an error.
func sendTo(client *http.Client, url string) SendFunc {
	return func(ctx context.Context, body *[]byte, res **http.Response) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err != nil {
			return err
		}
		r, err := client.Do(req)
		if err != nil {
			return err
		}
		defer r.Body.Close()
		*res = r
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		*body = b
		r.Body = io.NopCloser(bytes.NewReader(b))
		if r.StatusCode >= 400 {
			return fmt.Errorf("HTTP %d", r.StatusCode)
		}
		return nil
	}
}

// sleeps records the waits the loop asks for instead of waiting.
type sleeps struct {
	mu  sync.Mutex
	got []time.Duration
}

func (s *sleeps) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.got...)
}

func TestRetrierDo(t *testing.T) {
	rateLimited := step{status: 429, header: map[string]string{"Retry-After": "3"}, body: `{"error":{"message":"slow down"}}`}
	unavailable := step{status: 503, body: `{"error":{"message":"overloaded"}}`}
	firstBackoff := [2]time.Duration{BackoffBase / 2, BackoffBase}
	secondBackoff := [2]time.Duration{BackoffBase, 2 * BackoffBase}
	tests := []struct {
		name  string
		steps []step
		// retryable is the provider's choice of retried statuses; nil
		// means RetryableStatus, the adapters' choice.
		retryable     func(status int) bool
		maxRetries    int // zero means 3
		cancelInSleep bool
		wantReqs      int
		wantErr       error  // nil: success; else matched with errors.Is
		wantStatus    int    // of the *statusError in the error, if any
		wantText      string // in the error's text
		wantSleeps    []time.Duration
		sleepRange    [][2]time.Duration // for waits with jitter
	}{
		{
			name:     "429 waits exactly the Retry-After",
			steps:    []step{rateLimited, okStep()},
			wantReqs: 2, wantSleeps: []time.Duration{3 * time.Second},
		},
		{
			name:     "retry-after-ms wins over Retry-After",
			steps:    []step{{status: 429, header: map[string]string{"retry-after-ms": "1500", "Retry-After": "2"}}, okStep()},
			wantReqs: 2, wantSleeps: []time.Duration{1500 * time.Millisecond},
		},
		{
			name:     "5xx back off exponentially",
			steps:    []step{{status: 500, body: "oops"}, {status: 502, body: "<html>bad gateway</html>"}, okStep()},
			wantReqs: 3, sleepRange: [][2]time.Duration{firstBackoff, secondBackoff},
		},
		{
			name:     "4xx is not retried",
			steps:    []step{{status: 400, body: `{"error":{"message":"bad request"}}`}, okStep()},
			wantReqs: 1, wantErr: errAny, wantStatus: 400, wantText: "bad request",
		},
		{
			name:      "the provider decides which statuses are retried",
			steps:     []step{{status: 409}, {status: 503}, okStep()},
			retryable: func(status int) bool { return status == 409 },
			wantReqs:  2, wantErr: errAny, wantStatus: 503, sleepRange: [][2]time.Duration{firstBackoff},
		},
		{
			name:     "x-should-retry false is honoured",
			steps:    []step{{status: 500, header: map[string]string{"x-should-retry": "false"}}, okStep()},
			wantReqs: 1, wantErr: errAny, wantStatus: 500,
		},
		{
			name:       "attempts are bounded by MaxRetries",
			steps:      []step{unavailable, unavailable, unavailable, okStep()},
			maxRetries: 2,
			wantReqs:   3, wantErr: errAny, wantStatus: 503, wantText: "test: gave up after 3 attempts",
			sleepRange: [][2]time.Duration{firstBackoff, secondBackoff},
		},
		{
			name:       "no retries: the status error as it is",
			steps:      []step{unavailable, okStep()},
			maxRetries: -1,
			wantReqs:   1, wantErr: errAny, wantStatus: 503,
		},
		{
			name:     "a Retry-After beyond the wait budget ends the retries",
			steps:    []step{{status: 429, header: map[string]string{"Retry-After": "600"}}, okStep()},
			wantReqs: 1, wantErr: errAny, wantStatus: 429, wantText: "retry budget",
		},
		{
			name:     "a dropped connection is retried",
			steps:    []step{{drop: true}, okStep()},
			wantReqs: 2, sleepRange: [][2]time.Duration{firstBackoff},
		},
		{
			name:       "a transport error does not show the key",
			steps:      []step{{drop: true}},
			maxRetries: -1,
			wantReqs:   1, wantErr: errAny, wantText: "[redacted]",
		},
		{
			name:     "an error body echoing the key does not show it",
			steps:    []step{{status: 401, body: `{"error":{"message":"bad key ` + testKey + `"}}`}},
			wantReqs: 1, wantErr: errAny, wantStatus: 401, wantText: "bad key [redacted]",
		},
		{
			name:     "a cut 2xx body is a malformed response, not retried",
			steps:    []step{{status: 200, body: `{"ok":`, short: true}, okStep()},
			wantReqs: 1, wantErr: errTestResponse,
		},
		{
			name:     "a context cancelled during an attempt ends the loop",
			steps:    []step{{status: 503, cancel: true}, okStep()},
			wantReqs: 1, wantErr: context.Canceled, wantText: "test: request abandoned",
		},
		{
			name:          "a context cancelled while waiting ends the loop",
			steps:         []step{unavailable, okStep()},
			cancelInSleep: true,
			wantReqs:      1, wantErr: context.Canceled, wantText: "while waiting to retry",
			sleepRange: [][2]time.Duration{firstBackoff},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			srv := &script{t: t, steps: tt.steps, cancel: cancel}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			rec := &sleeps{}
			r := testRetrier(tt.retryable, tt.maxRetries, func(ctx context.Context, d time.Duration) error {
				rec.mu.Lock()
				rec.got = append(rec.got, d)
				rec.mu.Unlock()
				if tt.cancelInSleep {
					cancel()
					return ctx.Err()
				}
				return nil // the wait is recorded, not waited
			})
			body, err := r.Do(ctx, sendTo(ts.Client(), ts.URL+"/v1/"+testKey))
			if n := int(srv.n.Load()); n != tt.wantReqs {
				t.Fatalf("server saw %d requests, want %d (err %v)", n, tt.wantReqs, err)
			}
			checkErr(t, body, err, tt.wantErr, tt.wantStatus, tt.wantText)
			checkSleeps(t, rec.all(), tt.wantSleeps, tt.sleepRange)
		})
	}
}

// errAny in a table's wantErr asks for an error, of any kind.
var errAny = errors.New("any error")

func testRetrier(retryable func(int) bool, maxRetries int, sleep func(context.Context, time.Duration) error) *Retrier {
	if retryable == nil {
		retryable = RetryableStatus
	}
	switch {
	case maxRetries == 0:
		maxRetries = 3
	case maxRetries < 0:
		maxRetries = 0
	}
	scrub := func(s string) string { return Scrub(testKey, s) }
	return &Retrier{
		Name:           "test",
		MaxRetries:     maxRetries,
		RetryMaxWait:   2 * time.Minute,
		RequestTimeout: time.Minute,
		Sleep:          sleep,
		Scrub:          scrub,
		ErrResponse:    errTestResponse,
		APIError: func(res *http.Response) StatusError {
			b := ReadErrorBody(res, scrub)
			return &statusError{status: res.StatusCode, message: b.Message, retryable: retryable(res.StatusCode)}
		},
	}
}

func checkErr(t *testing.T, body []byte, err, wantErr error, wantStatus int, wantText string) {
	t.Helper()
	if wantErr == nil {
		if err != nil || string(body) != `{"ok":true}` {
			t.Fatalf("Do = %q, %v; want the 2xx body", body, err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Do = %q, nil; want an error", body)
	}
	if wantErr != errAny && !errors.Is(err, wantErr) {
		t.Fatalf("err = %v, want %v", err, wantErr)
	}
	if wantStatus != 0 {
		var se *statusError
		if !errors.As(err, &se) || se.status != wantStatus {
			t.Fatalf("err = %v, want a status error %d", err, wantStatus)
		}
	}
	if !strings.Contains(err.Error(), wantText) {
		t.Fatalf("err = %q, want it to say %q", err, wantText)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("err = %q shows the API key", err)
	}
}

func checkSleeps(t *testing.T, got, want []time.Duration, ranges [][2]time.Duration) {
	t.Helper()
	switch {
	case want != nil:
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("waits %v, want %v", got, want)
		}
	case len(got) != len(ranges):
		t.Fatalf("waits %v, want %d of them", got, len(ranges))
	}
	for i, r := range ranges {
		if got[i] < r[0] || got[i] > r[1] {
			t.Fatalf("wait %d = %s, want it in [%s, %s]", i+1, got[i], r[0], r[1])
		}
	}
}
