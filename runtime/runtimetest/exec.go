package runtimetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
)

// Executors is a fake runtime.ExecutorFactory. Its executors do not run
// JavaScript; they read a tiny script language, one statement per line:
//
//	call <capability> <json args>   invoke a capability through the canonical invoker
//	throw <message>                  fail the script
//	return <json>                    finish with a value (default: "ok")
//	hang                             block until the context ends
//
// It counts allocations, closes and executions per script call ID.
type Executors struct {
	// CloseErr makes every Close fail with it.
	CloseErr error
	// NewErr makes allocation fail with it.
	NewErr error

	mu       sync.Mutex
	allocs   int
	closes   int
	open     int
	executed map[string]int
}

// NewExecutor implements jstool.Factory.
func (f *Executors) NewExecutor(ctx context.Context, cfg jstool.Config) (jstool.Executor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.NewErr != nil {
		return nil, f.NewErr
	}
	f.allocs++
	f.open++
	return &executor{f: f, cfg: cfg}, nil
}

// Allocs returns how many executors were allocated.
func (f *Executors) Allocs() int { f.mu.Lock(); defer f.mu.Unlock(); return f.allocs }

// Open returns how many executors are allocated and not closed.
func (f *Executors) Open() int { f.mu.Lock(); defer f.mu.Unlock(); return f.open }

// Executed returns how often a script call ID was executed.
func (f *Executors) Executed(callID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.executed[callID]
}

// ExecutedAll returns a copy of the execution counts by call ID.
func (f *Executors) ExecutedAll() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.executed {
		out[k] = v
	}
	return out
}

type executor struct {
	f      *Executors
	cfg    jstool.Config
	closed bool
}

func (e *executor) Execute(ctx context.Context, s jstool.Script) (jstool.Outcome, error) {
	e.f.mu.Lock()
	if e.f.executed == nil {
		e.f.executed = map[string]int{}
	}
	e.f.executed[s.CallID]++
	closed := e.closed
	e.f.mu.Unlock()
	if closed {
		return jstool.Outcome{}, errors.New("runtimetest: execute on a closed executor")
	}
	value := json.RawMessage(`"ok"`)
	seq := 0
	for _, line := range strings.Split(s.Code, "\n") {
		verb, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch verb {
		case "", "//":
		case "call":
			name, args, _ := strings.Cut(rest, " ")
			seq++
			v, err := e.cfg.Invoke(ctx, s.CallID, seq, name, json.RawMessage(args))
			if err != nil {
				return jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: err.Error()}}, nil
			}
			value = v.JSON
		case "throw":
			return jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: rest}}, nil
		case "return":
			value = json.RawMessage(rest)
		case "hang":
			<-ctx.Done()
			return jstool.Outcome{}, ctx.Err()
		default:
			return jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: "SyntaxError: " + verb}}, nil
		}
	}
	return jstool.Outcome{Value: value, Logs: []jstool.LogLine{{Level: "log", Text: "ran " + s.CallID}}}, nil
}

func (e *executor) Close() error {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	if !e.closed {
		e.closed = true
		e.f.closes++
		e.f.open--
	}
	return e.f.CloseErr
}

// Backend is a fake capability backend that records invocations and answers
// with Results[capability] (default {"ok":true}).
type Backend struct {
	Results map[string]string
	Err     error

	mu    sync.Mutex
	calls []jstool.Invocation
}

// Invoke implements jstool.Backend.
func (b *Backend) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, inv)
	if b.Err != nil {
		return jstool.Value{}, b.Err
	}
	if r, ok := b.Results[inv.Capability]; ok {
		return jstool.Value{JSON: json.RawMessage(r)}, nil
	}
	return jstool.Value{JSON: json.RawMessage(`{"ok":true}`)}, nil
}

// Calls returns the recorded invocations.
func (b *Backend) Calls() []jstool.Invocation {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]jstool.Invocation(nil), b.calls...)
}

// Sink records sink events.
type Sink struct {
	mu     sync.Mutex
	events []runtime.SinkEvent
}

// Emit implements runtime.Sink.
func (s *Sink) Emit(ctx context.Context, ev runtime.SinkEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
}

// Events returns the recorded events.
func (s *Sink) Events() []runtime.SinkEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]runtime.SinkEvent(nil), s.events...)
}

// Clock is a settable clock.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock { return &Clock{t: time.Unix(1_700_000_000, 0).UTC()} }

// Now implements runtime.Clock.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Advance moves the clock.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// IDs is a deterministic ID source: run-1, run-2, ...
type IDs struct {
	mu sync.Mutex
	n  int
}

// NewID implements runtime.IDSource.
func (i *IDs) NewID() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.n++
	return fmt.Sprintf("run%d", i.n)
}

// FixedID is an ID source that always answers the same ID, as a host that
// names runs itself would: the run key then survives a lost first commit.
type FixedID string

// NewID implements runtime.IDSource.
func (f FixedID) NewID() string { return string(f) }
