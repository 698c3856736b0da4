// Package faults injects store failures by operation index, for any
// runtime.Store: fail the i-th operation before it takes effect, or let it
// take effect and then report an error, as when an acknowledgement is lost
// (pebble's errorfs.OnIndex, for stores). The crash matrix runs the run
// loop against every i and both modes.
package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// Op names a store operation.
type Op string

// The operations.
const (
	LoadCheckpoint Op = "LoadCheckpoint"
	SaveCheckpoint Op = "SaveCheckpoint"
	Load           Op = "Load"
	Compact        Op = "Compact"
)

// Mode says how an injected fault behaves.
type Mode int

// The modes.
const (
	None Mode = iota
	// Before returns an error and does not call the store.
	Before
	// After calls the store, then returns an error even if it succeeded.
	After
)

func (m Mode) String() string {
	switch m {
	case Before:
		return "before-commit"
	case After:
		return "after-commit"
	}
	return "none"
}

// ErrInjected is the error of an injected fault.
var ErrInjected = errors.New("faults: injected fault")

// Func decides the fault of operation number index (0-based, counted across
// every store the Injector wraps).
type Func func(op Op, index int) Mode

// At fails operation i with mode m.
func At(i int, m Mode) Func {
	return func(_ Op, index int) Mode {
		if index == i {
			return m
		}
		return None
	}
}

// Injector counts operations and decides their faults.
type Injector struct {
	mu  sync.Mutex
	n   int
	f   Func
	hit bool
}

// Set installs f (nil: no faults) and resets the counter.
func (in *Injector) Set(f Func) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.f, in.n, in.hit = f, 0, false
}

// Ops returns how many operations ran since the last Set.
func (in *Injector) Ops() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.n
}

// Hit reports whether a fault fired since the last Set.
func (in *Injector) Hit() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.hit
}

func (in *Injector) next(op Op) (int, Mode) {
	in.mu.Lock()
	defer in.mu.Unlock()
	i := in.n
	in.n++
	m := None
	if in.f != nil {
		m = in.f(op, i)
	}
	if m != None {
		in.hit = true
	}
	return i, m
}

// do runs one operation under the injector.
func (in *Injector) do(op Op, call func() error) error {
	i, m := in.next(op)
	if m == Before {
		return fmt.Errorf("%s (op %d, %s): %w", op, i, m, ErrInjected)
	}
	err := call()
	if m == After {
		return errors.Join(fmt.Errorf("%s (op %d, %s): %w", op, i, m, ErrInjected), err)
	}
	return err
}

// Wrap returns s with faults injected. History and Compactions, when s has
// them, pass through without faults: they are the test's view, not the
// loop's.
func (in *Injector) Wrap(s runtime.Store) runtime.Store { return &store{s: s, in: in} }

type store struct {
	s  runtime.Store
	in *Injector
}

func (w *store) LoadCheckpoint(ctx context.Context) (cp *runtime.Checkpoint, err error) {
	err = w.in.do(LoadCheckpoint, func() error {
		cp, err = w.s.LoadCheckpoint(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return cp, nil
}

func (w *store) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	return w.in.do(SaveCheckpoint, func() error { return w.s.SaveCheckpoint(ctx, cp) })
}

func (w *store) Load(ctx context.Context) (msgs []model.Message, err error) {
	err = w.in.do(Load, func() error {
		msgs, err = w.s.Load(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return msgs, nil
}

func (w *store) Compact(ctx context.Context, c session.Compaction) error {
	return w.in.do(Compact, func() error { return w.s.Compact(ctx, c) })
}

// History passes through to the wrapped store's session.Auditor.
func (w *store) History(ctx context.Context) ([]model.Message, error) {
	a, ok := w.s.(session.Auditor)
	if !ok {
		return nil, fmt.Errorf("faults: %T keeps no history", w.s)
	}
	return a.History(ctx)
}

// Unwrap returns the wrapped store.
func (w *store) Unwrap() runtime.Store { return w.s }
