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

// ErrUnknownCapability is returned for a callback to a name not bound.
var ErrUnknownCapability = errors.New("jstool: unknown capability")

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
	val, err := iv.invoke(ctx, scriptCallID, seq, capability, args)
	rec.Duration = iv.now().Sub(start)
	switch {
	case err == nil:
		rec.Outcome = "ok"
	case errors.Is(err, ErrUnknownCapability), errors.Is(err, schema.ErrInvalid):
		rec.Outcome, rec.Error = "rejected", iv.redactor.Redact(err.Error())
	default:
		rec.Outcome, rec.Error = "error", iv.redactor.Redact(err.Error())
	}
	iv.mu.Lock()
	iv.records[scriptCallID] = append(iv.records[scriptCallID], rec)
	iv.mu.Unlock()
	return val, err
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
