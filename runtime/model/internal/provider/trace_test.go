package provider

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
)

// Every failed attempt reaches the request's model.Trace, in order, with
// its status, its class and whether (and after what wait) the loop tries
// again; the last one of a step that fails says it is not retried. A body
// the parser refuses is a failure of the last attempt.
func TestEveryFailedAttemptIsReported(t *testing.T) {
	unavailable := step{status: 503, body: `{"error":{"message":"overloaded"}}`}
	type want struct {
		status int
		class  string
		retry  bool
	}
	tests := []struct {
		name       string
		steps      []step
		maxRetries int
		parseErr   bool
		want       []want
		wantErr    bool
	}{
		{name: "success at once", steps: []step{okStep()}},
		{name: "two 503 then success", steps: []step{unavailable, unavailable, okStep()},
			want: []want{{503, model.FailureStatus, true}, {503, model.FailureStatus, true}}},
		{name: "a dropped connection then success", steps: []step{{drop: true}, okStep()},
			want: []want{{0, model.FailureConnection, true}}},
		{name: "retries run out", steps: []step{unavailable, unavailable, unavailable}, maxRetries: 2, wantErr: true,
			want: []want{{503, model.FailureStatus, true}, {503, model.FailureStatus, true}, {503, model.FailureStatus, false}}},
		{name: "401 is not retried", steps: []step{{status: 401}}, wantErr: true,
			want: []want{{401, model.FailureStatus, false}}},
		{name: "a cut body is not retried", steps: []step{{status: 200, body: `{"ok":`, short: true}}, wantErr: true,
			want: []want{{200, model.FailureMalformed, false}}},
		{name: "a 503, then a body the parser refuses", steps: []step{unavailable, okStep()}, parseErr: true, wantErr: true,
			want: []want{{503, model.FailureStatus, true}, {200, model.FailureMalformed, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &script{t: t, steps: tt.steps}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			var waits []time.Duration
			r := testRetrier(nil, tt.maxRetries, func(_ context.Context, d time.Duration) error {
				waits = append(waits, d)
				return nil
			})
			r.Model = "m-1"
			var got []model.Failure
			ctx := model.WithTrace(t.Context(), &model.Trace{AttemptFailed: func(f model.Failure) { got = append(got, f) }})
			_, err := Parse(ctx, r, sendTo(ts.Client(), ts.URL+"/v1/"+testKey), func(b []byte) (string, error) {
				if tt.parseErr {
					return "", fmt.Errorf("%w: no choices", errTestResponse)
				}
				return string(b), nil
			})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("reported %d failures %+v, want %d", len(got), got, len(tt.want))
			}
			retried := 0
			for i, f := range got {
				w := tt.want[i]
				if f.Status != w.status || f.Class != w.class || f.Retry != w.retry || f.Attempt != i+1 {
					t.Fatalf("failure %d = %+v, want status %d class %s retry %v", i, f, w.status, w.class, w.retry)
				}
				if f.Provider != "test" || f.Model != "m-1" || f.Error == "" || f.At.IsZero() || strings.Contains(f.Error, testKey) {
					t.Fatalf("failure %d = %+v: want provider, model, an error without the key, a time", i, f)
				}
				if f.Retry {
					if f.RetryIn != waits[retried] {
						t.Fatalf("failure %d says retry in %s, the loop waited %s", i, f.RetryIn, waits[retried])
					}
					retried++
				} else if f.RetryIn != 0 {
					t.Fatalf("failure %d is not retried but says retry in %s", i, f.RetryIn)
				}
			}
			if retried != len(waits) {
				t.Fatalf("%d waits, %d failures said they were retried", len(waits), retried)
			}
		})
	}
}

// A policy's backoff: base doubled per retry up to its cap, the upper half
// jittered; the package's defaults when the policy sets none.
func TestRetrierBackoffPolicy(t *testing.T) {
	r := &Retrier{BackoffBase: 100 * time.Millisecond, BackoffMax: 300 * time.Millisecond}
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 300 * time.Millisecond, 40: 300 * time.Millisecond} {
		for range 20 {
			if d := r.backoff(attempt, 0, false); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want in [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
	// A base so large that doubling it would wrap stays at the cap.
	huge := &Retrier{BackoffBase: 1<<34 + 1, BackoffMax: time.Hour}
	for attempt := 1; attempt < 70; attempt++ {
		want := time.Hour
		if f := float64(1<<34+1) * math.Pow(2, float64(attempt-1)); f < float64(time.Hour) {
			want = time.Duration(f)
		}
		if d := huge.backoff(attempt, 0, false); d < want/2 || d > want {
			t.Fatalf("backoff(%d) of a huge base = %s, want in [%s, %s]", attempt, d, want/2, want)
		}
	}
	if d := r.backoff(1, 7*time.Second, true); d != 7*time.Second {
		t.Fatalf("a Retry-After of 7s gave %s", d)
	}
	if d := (&Retrier{}).backoff(1, 0, false); d < BackoffBase/2 || d > BackoffBase {
		t.Fatalf("default first backoff %s, want within %s", d, BackoffBase)
	}
}
