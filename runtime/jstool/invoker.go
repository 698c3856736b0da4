package jstool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/runtime/schema"
)

// Backend performs capability work for the host. The host authorizes every
// call itself (C10): nothing in an Invocation establishes authority.
type Backend interface {
	Invoke(ctx context.Context, inv Invocation) (Value, error)
}

// Invocation is one authorized-by-the-host capability call.
type Invocation struct {
	ScriptCallID string          `json:"script_call_id"`
	Seq          int             `json:"seq"`
	Capability   string          `json:"capability"`
	Args         json.RawMessage `json:"args"`
}

// Redactor removes secrets from text.
type Redactor interface {
	Redact(s string) string
}

// Capability is a capability with its compiled input schema.
type Capability struct {
	Info   CapabilityInfo
	Schema *schema.Schema
}

// Errors of a callback. The error Invoke returns carries only redacted text
// (it reaches JavaScript, and from there the model) and matches one of
// these, or schema.ErrInvalid for arguments that failed validation.
var (
	ErrUnknownCapability = errors.New("jstool: unknown capability")
	ErrBackend           = errors.New("jstool: capability failed")
)

// callbackError is a callback failure with redacted text.
type callbackError struct {
	msg  string
	kind error
}

func (e *callbackError) Error() string { return e.msg }
func (e *callbackError) Unwrap() error { return e.kind }

// Invoker is the canonical invoker: it validates a callback's arguments
// against the capability's schema, asks the Backend, redacts the result
// before JavaScript sees it (C41), and records attribution.
type Invoker struct {
	caps     map[string]Capability
	backend  Backend
	redactor Redactor
	now      func() time.Time

	mu      sync.Mutex
	records map[string][]Callback
}

// NewInvoker builds an invoker over caps. now may be nil (time.Now).
func NewInvoker(caps []Capability, backend Backend, redactor Redactor, now func() time.Time) *Invoker {
	m := make(map[string]Capability, len(caps))
	for _, c := range caps {
		m[c.Info.Name] = c
	}
	if now == nil {
		now = time.Now
	}
	return &Invoker{caps: m, backend: backend, redactor: redactor, now: now, records: map[string][]Callback{}}
}

// Invoke implements InvokeFunc.
func (iv *Invoker) Invoke(ctx context.Context, scriptCallID string, seq int, capability string, args json.RawMessage) (Value, error) {
	start := iv.now()
	rec := Callback{ScriptCallID: scriptCallID, Seq: seq, Capability: capability, ArgsDigest: digest(args)}
	val, err := iv.guarded(ctx, scriptCallID, seq, capability, args)
	rec.Duration = iv.now().Sub(start)
	if err != nil {
		kind := ErrBackend
		rec.Outcome = "error"
		switch {
		case errors.Is(err, ErrUnknownCapability):
			kind, rec.Outcome = ErrUnknownCapability, "rejected"
		case errors.Is(err, schema.ErrInvalid):
			kind, rec.Outcome = schema.ErrInvalid, "rejected"
		}
		rec.Error = iv.redactor.Redact(err.Error())
		err = &callbackError{msg: rec.Error, kind: kind}
	} else {
		rec.Outcome = "ok"
	}
	iv.mu.Lock()
	iv.records[scriptCallID] = append(iv.records[scriptCallID], rec)
	iv.mu.Unlock()
	return val, err
}

// guarded turns a panicking backend into an error, so the callback still
// has its attribution record.
func (iv *Invoker) guarded(ctx context.Context, scriptCallID string, seq int, capability string, args json.RawMessage) (v Value, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = Value{}, fmt.Errorf("caps.%s: internal error in the host", capability)
		}
	}()
	return iv.invoke(ctx, scriptCallID, seq, capability, args)
}

func (iv *Invoker) invoke(ctx context.Context, scriptCallID string, seq int, capability string, args json.RawMessage) (Value, error) {
	c, ok := iv.caps[capability]
	if !ok {
		return Value{}, fmt.Errorf("%w: %q", ErrUnknownCapability, capability)
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if err := c.Schema.Validate(args); err != nil {
		return Value{}, fmt.Errorf("caps.%s: arguments: %w", capability, err)
	}
	v, err := iv.backend.Invoke(ctx, Invocation{ScriptCallID: scriptCallID, Seq: seq, Capability: capability, Args: args})
	if err != nil {
		return Value{}, fmt.Errorf("caps.%s: %w", capability, err)
	}
	if len(v.JSON) == 0 {
		v.JSON = json.RawMessage("null")
	}
	red := iv.redactor.Redact(string(v.JSON))
	if !json.Valid([]byte(red)) {
		// A redaction that broke the JSON must not leak the original:
		// hand JavaScript the redacted text as a string.
		b, _ := json.Marshal(red)
		red = string(b)
	}
	v.JSON = json.RawMessage(red)
	return v, nil
}

// Take returns and forgets the attribution of one script's callbacks.
func (iv *Invoker) Take(scriptCallID string) []Callback {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	r := iv.records[scriptCallID]
	delete(iv.records, scriptCallID)
	return r
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}
