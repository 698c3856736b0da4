package schema

import (
	"errors"
	"testing"
	"time"
)

// fuzzTimeout flags an input that takes far too long (a hang, or work out
// of proportion to the input) even under the fuzzer's instrumentation.
const fuzzTimeout = 5 * time.Second

var fuzzInstances = [][]byte{
	[]byte(`null`), []byte(`true`), []byte(`0`), []byte(`-1.5e3`), []byte(`""`), []byte(`"abc"`),
	[]byte(`[]`), []byte(`[1,"a",null,[],{}]`), []byte(`{}`), []byte(`{"a":1,"b":[{"c":"d"}]}`),
}

// FuzzCompile feeds arbitrary bytes to the gate. It must never panic or
// hang; what it accepts must compile again from its canonical form to the
// same hash, validate without panicking, and embed in a completion schema.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`true`, `false`, `{}`, `{"type":"string","minLength":1}`, `{"minLenght":3}`,
		`{"$ref":"http://example.com/s"}`, `{"$defs":{"a":{"$ref":"#/$defs/a"}}}`,
		`{"enum":[]}`, `{"pattern":"(?=a)"}`, `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{}},"$ref":"#/definitions/a"}`,
		benchSchema,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		s, err := Compile(data)
		if err != nil {
			var ge *GateError
			if !errors.As(err, &ge) || !errors.Is(err, ErrGate) {
				t.Fatalf("error is %T %v", err, err)
			}
			if ge.internal {
				t.Fatalf("panic inside Compile: %v", err)
			}
			if ge.Reason == "" {
				t.Fatalf("gate error without a reason")
			}
			return
		}
		again, err := Compile(s.Canonical())
		if err != nil {
			t.Fatalf("canonical form %s refused: %v", s.Canonical(), err)
		}
		if again.Hash() != s.Hash() {
			t.Fatalf("canonical form hashes differently")
		}
		for _, in := range fuzzInstances {
			checkValidate(t, s, in)
		}
		cs, err := CompletionSchema(s)
		if err != nil {
			// The wrapper adds four levels of nesting.
			if jsonDepth(s.c.doc) > maxSchemaDepth-completionDepth {
				return
			}
			t.Fatalf("CompletionSchema refused a gated schema: %v", err)
		}
		checkValidate(t, cs, []byte(`{"type":"needs_input","question":"q"}`))
		for _, in := range fuzzInstances {
			checkValidate(t, cs, append(append([]byte(`{"type":"output","output":`), in...), '}'))
		}
		if d := time.Since(start); d > fuzzTimeout {
			t.Fatalf("took %v", d)
		}
	})
}

// fuzzSchema is fixed and non-trivial: nested objects, a recursive $ref,
// oneOf with a discriminator, anyOf, not, prefixItems, patterns, numbers.
const fuzzSchema = `{
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^[a-z]+-[0-9]+$", "maxLength": 20},
    "n": {"type": "number", "multipleOf": 0.01, "exclusiveMinimum": -1000, "maximum": 1e9},
    "big": {"type": "integer", "minimum": 9007199254740993},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c", 1, null]}, "uniqueItems": true, "maxItems": 5},
    "pair": {"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false},
    "tree": {"$ref": "#/$defs/node"},
    "pick": {"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "x"}, "v": {"type": "string", "minLength": 2}}, "required": ["kind", "v"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "y"}, "v": {"type": "integer"}}, "required": ["kind"], "additionalProperties": false}
    ]},
    "any": {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "object", "minProperties": 1, "maxProperties": 2}]},
    "not": {"not": {"const": "forbidden"}}
  },
  "required": ["id"],
  "additionalProperties": {"type": ["string", "number"]},
  "$defs": {
    "node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}
  }
}`

// FuzzValidate validates arbitrary bytes against fuzzSchema. It must never
// panic or hang, must be deterministic, and must not depend on layout: the
// canonical re-encoding of a parsed instance gets the same verdict and
// issues.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"id":"a-1"}`, `{"id":"a-1","n":0.07,"tags":["a",1,null],"pair":["x",2]}`,
		`{"id":"A","n":0.071,"tags":["a","a"],"pair":["x","y",3]}`,
		`{"id":"a-1","tree":{"v":1,"kids":[{"v":2,"kids":[{"v":"x"}]}]}}`,
		`{"id":"a-1","pick":{"kind":"x","v":"a"},"any":{},"not":"forbidden"}`,
		`{"id":"a-1","big":9007199254740992,"extra":[1]}`, `[1e999999]`, `{"id":"a-1","n":1e-1000}`,
		`{"id":`, `"x"`, `null`,
	} {
		f.Add([]byte(s))
	}
	s := mustCompile(f, fuzzSchema)
	f.Fuzz(func(t *testing.T, data []byte) {
		start := time.Now()
		err1 := checkValidate(t, s, data)
		err2 := checkValidate(t, s, data)
		if errString(err1) != errString(err2) {
			t.Fatalf("not deterministic:\n%v\n%v", err1, err2)
		}
		if v, jerr := decodeJSON(data, maxInstanceDepth, true); jerr == nil {
			err3 := checkValidate(t, s, appendCanonical(nil, v))
			if errString(err1) != errString(err3) {
				t.Fatalf("layout changed the result:\n%v\n%v", err1, err3)
			}
		}
		if d := time.Since(start); d > fuzzTimeout {
			t.Fatalf("took %v", d)
		}
	})
}

// checkValidate validates and checks the shape of the result.
func checkValidate(t *testing.T, s *Schema, in []byte) error {
	t.Helper()
	err := s.Validate(in)
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("error is %T %v", err, err)
	}
	if len(ve.Issues) == 0 {
		t.Fatalf("invalid without issues")
	}
	for _, is := range ve.Issues {
		if is.Message == "" {
			t.Fatalf("issue without a message: %+v", is)
		}
		if is.Message == internalIssue {
			t.Fatalf("panic inside Validate of %q", in)
		}
	}
	return err
}

// jsonDepth is the nesting depth of arrays and objects in v.
func jsonDepth(v any) int {
	d := 0
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			d = max(d, jsonDepth(e))
		}
		return d + 1
	case map[string]any:
		for _, e := range v {
			d = max(d, jsonDepth(e))
		}
		return d + 1
	}
	return 0
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
