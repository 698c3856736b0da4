package runtime

import (
	"errors"
	"fmt"
)

// ErrWaiting accompanies Result{Waiting: true}: the run parked on a
// wait_calls whose dependencies and deadline the Controller recorded (C6, C28).
var ErrWaiting = errors.New("runtime: waiting")

// ErrInvalidInput marks every Input problem found before any durable write.
// The concrete error is an *InputError naming the field.
var ErrInvalidInput = errors.New("runtime: invalid input")

// ErrContractMismatch is returned when a checkpoint was written under another
// contract (definition, schemas, capabilities) or checkpoint version (C9).
var ErrContractMismatch = errors.New("runtime: checkpoint contract mismatch")

// ErrModelResponse marks a model response the loop cannot journal (empty or
// duplicate tool-call IDs, IDs reused from earlier steps). Nothing of it is
// committed; the attempt stops like on any model error (C23).
var ErrModelResponse = errors.New("runtime: unusable model response")

// ErrDrained is returned when Input.Drain closed: the attempt stopped
// between two commits, and the next attempt resumes exactly there.
var ErrDrained = errors.New("runtime: drained at a commit boundary")

// ErrPanic wraps a panic recovered from an injected component.
var ErrPanic = errors.New("runtime: recovered panic")

// Store errors. Implementations wrap them so callers can use errors.Is.
var (
	// ErrConflict: the revision is stale, skips ahead, or conflicts with a
	// different committed checkpoint of the same revision (C13).
	ErrConflict = errors.New("store: revision conflict")
	// ErrLeaseLost: a newer lease holder fenced this writer out (C18).
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrSessionBusy: another run of the session is active; continuations
	// are serialized (C18).
	ErrSessionBusy = errors.New("store: session has an active run")
)

// InputError names the Input field at fault and why.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("runtime: invalid input: %s: %s", e.Field, e.Reason)
}

// Is matches ErrInvalidInput.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// FatalToolError is implemented by controller and backend errors that must
// stop the attempt instead of becoming a tool error the model sees (C23).
type FatalToolError interface {
	error
	FatalToolError()
}

// Fatal wraps err so that it implements FatalToolError.
func Fatal(err error) error { return fatalError{err} }

type fatalError struct{ err error }

func (f fatalError) Error() string   { return f.err.Error() }
func (f fatalError) Unwrap() error   { return f.err }
func (f fatalError) FatalToolError() {}

func isFatal(err error) bool {
	var f FatalToolError
	return errors.As(err, &f)
}
