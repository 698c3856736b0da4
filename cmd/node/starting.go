package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/internal/clock"
)

// startLogEvery is how often a starting node says what it waits for.
const startLogEvery = 3 * time.Second

// Pauses between the tries of a dependency the start waits for: the first,
// doubling up to the last.
const (
	startRetryFirst = 250 * time.Millisecond
	startRetryMax   = 2 * time.Second
)

// starting tells what a node's start waits for, from the start until the
// node serves: every startLogEvery while it waits for something (peers, a
// quorum, a lock, a stream leader), what that is, since when, what is
// known of it, and the last try's error. However long a start lasts, it
// is never silent for longer than that, and an operator reads in the log
// what to bring up.
type starting struct {
	logger *slog.Logger
	clk    clock.Clock

	mu sync.Mutex
	// what the start waits for now ("" when it waits for nothing).
	what string
	// detail tells more about it, read each time it is logged (nil: nothing).
	detail func() []any
	// since when it waits for it.
	since time.Time
	// err is the last try's error.
	err error

	stop chan struct{}
	done chan struct{}
}

// newStarting starts telling what the start waits for, on logger (nil
// discards) and clk (nil: the wall clock), until end.
func newStarting(logger *slog.Logger, clk clock.Clock) *starting {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	s := &starting{logger: logger, clk: clk, stop: make(chan struct{}), done: make(chan struct{})}
	t := clk.NewTicker(startLogEvery)
	go func() {
		defer close(s.done)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C():
				s.log()
			}
		}
	}()
	return s
}

// log tells what the start waits for now, if anything.
func (s *starting) log() {
	s.mu.Lock()
	what, detail, since, err := s.what, s.detail, s.since, s.err
	s.mu.Unlock()
	if what == "" {
		return
	}
	attrs := []any{"waited", s.clk.Now().Sub(since).Round(time.Second).String()}
	if detail != nil {
		attrs = append(attrs, detail()...)
	}
	if err != nil {
		attrs = append(attrs, "last_err", err.Error())
	}
	s.logger.Info("node starting: waiting for "+what, attrs...)
}

// waitingFor says that the start now waits for what; detail, when set,
// tells more about it each time it is logged.
func (s *starting) waitingFor(what string, detail func() []any) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.what != what {
		s.since = s.clk.Now()
	}
	s.what, s.detail, s.err = what, detail, nil
}

// failed records the last try's error of what the start waits for.
func (s *starting) failed(err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// waited says that the start waits for nothing now.
func (s *starting) waited() { s.waitingFor("", nil) }

// end stops telling; the node serves, or its start gave up.
func (s *starting) end() {
	if s == nil {
		return
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// wait is what a start waits for, for await.
type wait struct {
	// what names it in the log ("the NATS cluster").
	what string
	// detail, when set, tells more about it each time it is logged.
	detail func() []any
	// permanent, when set, reports the errors no wait fixes (a
	// configuration at fault): they end the wait at once.
	permanent func(error) bool
	// pause, when set, is the pause before each next try; otherwise
	// startRetryFirst, doubling up to startRetryMax.
	pause func() time.Duration
}

// await runs try until it succeeds, pausing between tries, for as long as
// ctx lasts: what the start needs and does not have yet (a quorum, a
// stream leader, a lock) is waited for, never given up on, and named in
// the log meanwhile (waitingFor). A permanent error ends the wait at once
// with that error. When ctx ends first, the error wraps ctx's and the
// last try's.
func (s *starting) await(ctx context.Context, w wait, try func(context.Context) error) error {
	s.waitingFor(w.what, w.detail)
	defer s.waited()
	pause := startRetryFirst
	for {
		err := try(ctx)
		if err == nil {
			return nil
		}
		if w.permanent != nil && w.permanent(err) {
			return err
		}
		s.failed(err)
		if ctx.Err() != nil {
			return stoppedWaiting(ctx, w.what, err)
		}
		d := pause
		if w.pause != nil {
			d = w.pause()
		}
		t := s.clock().NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return stoppedWaiting(ctx, w.what, err)
		case <-t.C():
		}
		pause = min(2*pause, startRetryMax)
	}
}

func (s *starting) clock() clock.Clock {
	if s == nil {
		return clock.Real{}
	}
	return s.clk
}

// stoppedWaiting is the error of a wait that ctx ended.
func stoppedWaiting(ctx context.Context, what string, last error) error {
	if last == nil || errors.Is(last, ctx.Err()) {
		return fmt.Errorf("stopped while waiting for %s: %w", what, ctx.Err())
	}
	return fmt.Errorf("stopped while waiting for %s (last: %w): %w", what, last, ctx.Err())
}
