package provider

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
)

// Do marks what it does not retry model.ErrPermanent, and a retryable
// error whose retries ran out too (the loop is the only one: the agent's
// retry policy is the whole of what a step may send), but not a cancelled
// context.
func TestRetrierDoPermanent(t *testing.T) {
	unavailable := step{status: 503, body: `{"error":{"message":"overloaded"}}`}
	tests := []struct {
		name          string
		steps         []step
		maxRetries    int // zero means 3
		cancelInSleep bool
		wantReqs      int
		wantErr       error // nil: success
		permanent     bool
	}{
		{name: "400", steps: []step{{status: 400}, okStep()}, wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "401", steps: []step{{status: 401}, okStep()}, wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "403", steps: []step{{status: 403}, okStep()}, wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "404", steps: []step{{status: 404}, okStep()}, wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "422", steps: []step{{status: 422}, okStep()}, wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "a cut 2xx body", steps: []step{{status: 200, body: `{"ok":`, short: true}, okStep()},
			wantReqs: 1, wantErr: errTestResponse, permanent: true},
		{name: "x-should-retry false", steps: []step{{status: 503, header: map[string]string{"x-should-retry": "false"}}, okStep()},
			wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "408 is retried", steps: []step{{status: 408}, okStep()}, wantReqs: 2},
		{name: "409 is retried", steps: []step{{status: 409}, okStep()}, wantReqs: 2},
		{name: "x-should-retry true is retried", steps: []step{{status: 400, header: map[string]string{"x-should-retry": "true"}}, okStep()},
			wantReqs: 2},
		{name: "retries ran out", steps: []step{unavailable, unavailable, unavailable}, maxRetries: 2,
			wantReqs: 3, wantErr: errAny, permanent: true},
		{name: "retries off", steps: []step{unavailable, okStep()}, maxRetries: -1, wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "a dropped connection, retries off", steps: []step{{drop: true}}, maxRetries: -1, wantReqs: 1, wantErr: errAny, permanent: true},
		{name: "cancelled while waiting", steps: []step{unavailable, okStep()}, cancelInSleep: true,
			wantReqs: 1, wantErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			srv := &script{t: t, steps: tt.steps, cancel: cancel}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			r := testRetrier(nil, tt.maxRetries, func(ctx context.Context, d time.Duration) error {
				if tt.cancelInSleep {
					cancel()
					return ctx.Err()
				}
				return nil
			})
			body, err := r.Do(ctx, sendTo(ts.Client(), ts.URL+"/v1/"+testKey))
			if n := int(srv.n.Load()); n != tt.wantReqs {
				t.Fatalf("server saw %d requests, want %d (err %v)", n, tt.wantReqs, err)
			}
			checkErr(t, body, err, tt.wantErr, 0, "")
			if got := errors.Is(err, model.ErrPermanent); got != tt.permanent {
				t.Fatalf("err = %v: permanent %v, want %v", err, got, tt.permanent)
			}
		})
	}
}
