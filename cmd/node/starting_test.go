package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/internal/syncbuf"
)

// logged waits until buf holds n lines that contain each of subs, and
// returns them.
func logged(t *testing.T, buf *syncbuf.Buffer, n int, subs ...string) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got []string
		for _, line := range strings.Split(buf.String(), "\n") {
			all := line != ""
			for _, s := range subs {
				all = all && strings.Contains(line, s)
			}
			if all {
				got = append(got, line)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, %d lines with %q, want %d; the log:\n%s", len(got), subs, n, buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A start that waits says what for, every startLogEvery, with what is
// known of it and the last try's error; a start that waits for nothing
// says nothing.
func TestStartingSaysWhatItWaitsFor(t *testing.T) {
	var buf syncbuf.Buffer
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := newStarting(slog.New(slog.NewTextHandler(&buf, nil)), clk)
	defer st.end()
	if err := clk.BlockUntil(context.Background(), 1); err != nil { // the ticker
		t.Fatal(err)
	}
	st.waitingFor("the NATS cluster", func() []any { return []any{"connected", "1 of 3 servers [n1]"} })
	st.failed(errors.New("no meta leader"))
	for i := 1; i <= 3; i++ {
		clk.Advance(startLogEvery)
		lines := logged(t, &buf, i, "waiting for the NATS cluster", `connected="1 of 3 servers [n1]"`, `last_err="no meta leader"`)
		if want := fmt.Sprintf("waited=%ds", 3*i); !strings.Contains(lines[i-1], want) {
			t.Fatalf("line %d: %s; want %s", i, lines[i-1], want)
		}
	}
	st.waited()
	st.log()
	if n := strings.Count(buf.String(), "\n"); n != 3 {
		t.Fatalf("%d lines, want 3 (none while the start waits for nothing):\n%s", n, buf.String())
	}
}

// advanceUntil advances clk by step whenever the code under test armed a
// timer beside the starting's ticker, until done is closed.
func advanceUntil(t *testing.T, clk *clock.Fake, step time.Duration, done <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-done
		cancel()
	}()
	for ctx.Err() == nil {
		if clk.BlockUntil(ctx, 2) == nil {
			clk.Advance(step)
		}
	}
}

// A dependency of the start is waited for as long as it takes (issue 43:
// the member's start gave up after 5 minutes, the run index's at its
// first timeout), and the wait ends at once when ctx does, or on an
// error no wait fixes.
func TestAwaitNeverGivesUp(t *testing.T) {
	var buf syncbuf.Buffer
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := newStarting(slog.New(slog.NewTextHandler(&buf, nil)), clk)
	defer st.end()
	ctx := context.Background()
	outage := fmt.Errorf("runindex: %w", context.DeadlineExceeded)
	permanent := errors.New("no such stream")

	// An hour of outage (fake time), then the dependency is there.
	tries, done := 0, make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = st.await(ctx, wait{what: "the run index", permanent: func(err error) bool { return errors.Is(err, permanent) }}, func(context.Context) error {
			if tries++; clk.Now().Before(time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)) {
				return outage
			}
			return nil
		})
	}()
	advanceUntil(t, clk, startRetryMax, done)
	if err != nil {
		t.Fatalf("await: %v", err)
	}
	if tries < 1800 {
		t.Fatalf("%d tries in an hour, want at least 1800 (one every %s)", tries, startRetryMax)
	}
	logged(t, &buf, 1, "waiting for the run index", "context deadline exceeded")

	// An error no wait fixes ends the wait at once.
	err = st.await(ctx, wait{what: "x", permanent: func(err error) bool { return errors.Is(err, permanent) }}, func(context.Context) error { return permanent })
	if !errors.Is(err, permanent) {
		t.Fatalf("permanent: %v", err)
	}

	// Ctrl-C while it waits.
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() {
		cancelled <- st.await(cctx, wait{what: "the NATS cluster"}, func(context.Context) error { return outage })
	}()
	if err := clk.BlockUntil(ctx, 2); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the NATS cluster") {
		t.Fatalf("cancelled: %v; want one that wraps the cancellation and the last error, naming what it waited for", err)
	}
}

// A member's start that fails for an outage is tried again for as long
// as the outage lasts (issue 43: it gave up after its sixth attempt); one
// that fails for another reason startFailures times; a duplicate node
// name ends it at once. Fails with the limit of six attempts put back.
func TestRetryStartWaitsOutAnOutage(t *testing.T) {
	ctx := context.Background()
	outage := fmt.Errorf("kv: %w", context.DeadlineExceeded)
	noPeers := fmt.Errorf("actors: bucket: %w", &njs.APIError{Code: 500, ErrorCode: 10005, Description: "no suitable peers for placement"})
	other := errors.New("agents: bad definition")
	tests := []struct {
		name     string
		fails    []error // the attempts' errors, in order; then it starts
		fault    error   // what fault reports after a failure
		wantErr  error
		attempts int
	}{
		{"an outage of 30 attempts", repeat(outage, 30), nil, nil, 31},
		{"no peers for 10 attempts", repeat(noPeers, 10), nil, nil, 11},
		{"another failure", repeat(other, 30), nil, other, startFailures},
		{"outages between other failures", append(repeat(outage, 10), repeat(other, 5)...), nil, nil, 16},
		{"a duplicate name", repeat(outage, 3), errDuplicateName, errDuplicateName, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			st := newStarting(nil, clk)
			defer st.end()
			attempts := 0
			var a *app
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				a, err = retryStart(ctx, nil, st, func() error { return tt.fault }, func(attempt int) (*app, error) {
					if attempts++; attempt != attempts {
						return nil, fmt.Errorf("attempt %d, want %d", attempt, attempts)
					}
					if attempt <= len(tt.fails) {
						return nil, tt.fails[attempt-1]
					}
					return &app{}, nil
				})
			}()
			advanceUntil(t, clk, time.Second, done)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (a != nil) || attempts != tt.attempts {
				t.Fatalf("retryStart: %v after %d attempts; want %v after %d", err, attempts, tt.wantErr, tt.attempts)
			}
		})
	}
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}
