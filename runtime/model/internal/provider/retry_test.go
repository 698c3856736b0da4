package provider

import (
	"net/http"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	if d := Backoff(1, 7*time.Second, true); d != 7*time.Second {
		t.Fatalf("Retry-After 7s gave %s", d)
	}
	for attempt := 1; attempt <= 70; attempt++ {
		hi := min(BackoffBase<<min(attempt-1, 20), BackoffMax)
		if d := Backoff(attempt, 0, false); d < hi/2 || d > hi {
			t.Fatalf("attempt %d: %s not in [%s, %s]", attempt, d, hi/2, hi)
		}
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{"none", nil, 0, false},
		{"seconds", map[string]string{"Retry-After": "12"}, 12 * time.Second, true},
		{"fractional seconds", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond, true},
		{"milliseconds", map[string]string{"retry-after-ms": "250"}, 250 * time.Millisecond, true},
		{"date", map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second, true},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0, false},
		{"negative", map[string]string{"Retry-After": "-3"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got, ok := RetryAfter(h, now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("RetryAfter = %s, %v; want %s, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
