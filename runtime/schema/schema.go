package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/kaptinlin/jsonschema"
)

// Schema is a schema that passed the gate, compiled for validation. It is
// immutable and safe for concurrent use.
type Schema struct {
	raw []byte
	c   *compiled
}

// compiled is what Schemas with the same canonical form share.
type compiled struct {
	lib       *jsonschema.Schema
	doc       any    // the decoded document, for messages and CompletionSchema
	canonical []byte // canonical JSON
	hash      string // hex sha256 of canonical
	// refTargets maps the pointer of each schema object holding a $ref to
	// the tokens of its target, to follow validation results through refs.
	refTargets map[string][]string
	plan       *plan // to bound the library's work before it runs
	// quick accepts most valid values without the library (nil: the
	// schema uses a keyword it does not know).
	quick    *quick
	isObject bool
}

// Compile gates and compiles raw schema JSON. Errors are *GateError
// (errors.Is(err, ErrGate)). Results are cached: compiling the same bytes
// again costs a hash and a map lookup, and schemas that differ only in
// whitespace and key order share one compiled form.
func Compile(raw []byte) (_ *Schema, err error) {
	defer func() {
		// A last resort: a panic in the library (or here) refuses the
		// schema instead of crashing the node.
		if p := recover(); p != nil {
			err = &GateError{Reason: fmt.Sprintf("internal error: the validator failed on this schema: %v", p), internal: true}
		}
	}()
	rawKey := sha256.Sum256(raw)
	if s, ok := schemaCache.bytes.Get(rawKey); ok {
		return s, nil
	}
	doc, jerr := decodeJSON(raw, maxSchemaDepth, false)
	if jerr != nil {
		return nil, gateErr(jerr.Pointer, "", jerr.Reason)
	}
	canonical := appendCanonical(nil, doc)
	key := sha256.Sum256(canonical)
	c, ok := schemaCache.canonical.Get(key)
	if !ok {
		var gerr *GateError
		c, gerr = build(doc, canonical, key)
		if gerr != nil {
			return nil, gerr
		}
		schemaCache.canonical.Add(key, c, len(canonical))
	}
	s := &Schema{raw: bytes.Clone(raw), c: c}
	schemaCache.bytes.Add(rawKey, s, len(raw))
	return s, nil
}

// build gates and compiles a decoded document, uncached.
func build(doc any, canonical []byte, key [32]byte) (*compiled, *GateError) {
	g, gerr := check(doc)
	if gerr != nil {
		return nil, gerr
	}
	p := newPlan(g)
	if gerr := p.checkExpansion(g); gerr != nil {
		return nil, gerr
	}
	lib, gerr := compileLibrary(canonical, g)
	if gerr != nil {
		return nil, gerr
	}
	obj, _ := doc.(map[string]any)
	return &compiled{
		lib:        lib,
		doc:        doc,
		canonical:  canonical,
		hash:       hex.EncodeToString(key[:]),
		refTargets: g.refTargets,
		plan:       p,
		quick:      newQuick(doc),
		isObject:   obj["type"] == "object",
	}, nil
}

// Raw returns the schema's bytes as given to Compile, unchanged: what the
// model sees. The slice is a copy.
func (s *Schema) Raw() json.RawMessage { return bytes.Clone(s.raw) }

// Canonical returns the canonical JSON of the schema, for hashing: no
// insignificant whitespace, object members sorted by name (code point
// order), numbers exactly as written, strings with minimal escaping. The
// slice is a copy.
func (s *Schema) Canonical() []byte { return bytes.Clone(s.c.canonical) }

// Hash returns the hex SHA-256 of Canonical().
func (s *Schema) Hash() string { return s.c.hash }

// IsObjectType reports whether the top-level "type" is exactly "object"
// (model providers need object schemas for tool input). A type array such
// as ["object"] does not count.
func (s *Schema) IsObjectType() bool { return s.c.isObject }
