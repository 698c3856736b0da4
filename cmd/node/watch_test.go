package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/store/jetstream"
)

// The watch gives up on the embedded server only after strikes failed
// checks in a row (a check that passes starts the count again), names
// the cause, and returns nil when serve stops first. The ticks are the
// test's: no time passes.
func TestWatchJetStream(t *testing.T) {
	off := fmt.Errorf("%w: JetStream is turned off", jetstream.ErrStoreFailed)
	for _, tc := range []struct {
		name   string
		checks []error // what healthy answers, check by check
		// exits is the check after which the watch returns an error (1
		// based); 0: it never does, and stops when the context ends.
		exits int
	}{
		{"healthy", []error{nil, nil, nil, nil}, 0},
		{"off for good", []error{nil, off, off, off}, 4},
		{"recovers in between", []error{off, off, nil, off, off, nil}, 0},
		{"off from the start", []error{off, off, off, nil}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tick := make(chan time.Time)
			checked := make(chan int)
			i := 0
			healthy := func() error {
				err := tc.checks[i]
				i++
				checked <- i
				return err
			}
			done := make(chan error, 1)
			go func() { done <- watchJetStream(ctx, tick, healthy, 3) }()
			for n := 1; n <= len(tc.checks); n++ {
				tick <- time.Time{}
				<-checked
				if n == tc.exits {
					err := <-done
					if !errors.Is(err, jetstream.ErrStoreFailed) {
						t.Fatalf("after check %d: %v, want an error wrapping the cause", n, err)
					}
					return
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("the watch gave up: %v", err)
			}
		})
	}
}
