package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/runtime/schema"
)

// TestConvertSchemaExact checks each down-conversion on instances whose
// verdict under the original keyword's standard meaning is written down:
// the converted schema must accept and refuse exactly those.
func TestConvertSchemaExact(t *testing.T) {
	tests := []struct {
		name            string
		schema          string
		valid, invalid  []string
		wantConversions int
	}{
		{
			name:   "if/then/else",
			schema: `{"type":"object","properties":{"kind":{"enum":["box","bag"]}},"if":{"properties":{"kind":{"const":"box"}}},"then":{"required":["size"]},"else":{"required":["handle"]}}`,
			valid:  []string{`{"kind":"box","size":1}`, `{"kind":"bag","handle":true}`},
			// no kind: the if holds (properties is vacuous), so then applies.
			invalid:         []string{`{"kind":"box"}`, `{"kind":"bag"}`, `{"kind":"box","handle":1}`, `{}`, `{"handle":1}`},
			wantConversions: 1,
		},
		{
			name:            "if/then without else, beside an allOf",
			schema:          `{"type":"object","allOf":[{"required":["a"]}],"if":{"required":["b"]},"then":{"required":["c"]}}`,
			valid:           []string{`{"a":1}`, `{"a":1,"b":1,"c":1}`},
			invalid:         []string{`{"a":1,"b":1}`, `{"b":1,"c":1}`},
			wantConversions: 1,
		},
		{
			name:            "then without if asserts nothing",
			schema:          `{"type":"object","then":{"required":["x"]}}`,
			valid:           []string{`{}`},
			wantConversions: 1,
		},
		{
			name:            "dependentRequired",
			schema:          `{"type":"object","dependentRequired":{"card":["billing"]}}`,
			valid:           []string{`{}`, `{"billing":1}`, `{"card":1,"billing":1}`},
			invalid:         []string{`{"card":1}`},
			wantConversions: 1,
		},
		{
			name:            "dependentSchemas",
			schema:          `{"type":"object","dependentSchemas":{"card":{"properties":{"billing":{"type":"string"}},"required":["billing"]}}}`,
			valid:           []string{`{}`, `{"card":1,"billing":"x"}`},
			invalid:         []string{`{"card":1}`, `{"card":1,"billing":2}`},
			wantConversions: 1,
		},
		{
			name:            "draft-07 dependencies, both forms",
			schema:          `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","dependencies":{"a":["b"],"c":{"required":["d"]}}}`,
			valid:           []string{`{}`, `{"a":1,"b":1}`, `{"c":1,"d":1}`},
			invalid:         []string{`{"a":1}`, `{"c":1}`},
			wantConversions: 1,
		},
		{
			name:            "propertyNames of type string (zod's z.record)",
			schema:          `{"type":"object","properties":{"tags":{"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"number"}}}}`,
			valid:           []string{`{"tags":{"a":1}}`},
			invalid:         []string{`{"tags":{"a":"x"}}`},
			wantConversions: 1,
		},
		{
			name:            "content annotations",
			schema:          `{"type":"object","properties":{"img":{"type":"string","contentEncoding":"base64","contentMediaType":"image/png"}}}`,
			valid:           []string{`{"img":"not even base64"}`},
			invalid:         []string{`{"img":1}`},
			wantConversions: 2,
		},
		{
			name:            "nested in $defs through $ref",
			schema:          `{"type":"object","properties":{"p":{"$ref":"#/$defs/P"}},"$defs":{"P":{"type":"object","if":{"required":["a"]},"then":{"required":["b"]}}}}`,
			valid:           []string{`{"p":{}}`, `{"p":{"a":1,"b":2}}`},
			invalid:         []string{`{"p":{"a":1}}`},
			wantConversions: 1,
		},
		{
			name:    "nothing to convert: bytes unchanged",
			schema:  `{"type":"object","properties":{"n":{"type":"integer","maximum":12345678901234567890123}}}`,
			valid:   []string{`{"n":12345678901234567890123}`},
			invalid: []string{`{"n":12345678901234567890124}`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, conversions, err := gateToolSchema("srv", "tool", []byte(tc.schema))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(conversions) != tc.wantConversions {
				t.Errorf("conversions = %q, want %d", conversions, tc.wantConversions)
			}
			if tc.wantConversions == 0 && !bytes.Equal(out, []byte(tc.schema)) {
				t.Errorf("unconverted schema changed:\n%s", out)
			}
			s, err := schema.Compile(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range tc.valid {
				if err := s.Validate([]byte(v)); err != nil {
					t.Errorf("%s: refused: %v", v, err)
				}
			}
			for _, v := range tc.invalid {
				if err := s.Validate([]byte(v)); !errors.Is(err, schema.ErrInvalid) {
					t.Errorf("%s: accepted (err %v)", v, err)
				}
			}
		})
	}
}

// TestGateToolSchemaRefuses: what has no exact conversion stops the start
// with the server, the tool and the keyword named.
func TestGateToolSchemaRefuses(t *testing.T) {
	tests := []struct {
		name, schema, keyword, pointer string
	}{
		{"patternProperties", `{"type":"object","patternProperties":{"^x":{}}}`, "patternProperties", ""},
		{"propertyNames with a pattern", `{"type":"object","properties":{"m":{"type":"object","propertyNames":{"pattern":"^a"}}}}`, "propertyNames", "/properties/m"},
		{"unknown keyword", `{"type":"object","properties":{"a":{"type":"string","x-order":1}}}`, "x-order", "/properties/a"},
		{"dependencies under 2020-12", `{"type":"object","dependencies":{"a":["b"]}}`, "dependencies", ""},
		{"contains", `{"type":"object","properties":{"l":{"type":"array","contains":{"const":1}}}}`, "contains", "/properties/l"},
		{"not an object schema", `{"type":"array"}`, "type", ""},
		{"no type", `{"properties":{}}`, "type", ""},
		{"$id", `{"$id":"https://x/y","type":"object"}`, "$id", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := gateToolSchema("everything", "echo", []byte(tc.schema))
			var se *SchemaError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SchemaError", err)
			}
			if se.Server != "everything" || se.Tool != "echo" || se.Keyword != tc.keyword || se.Pointer != tc.pointer {
				t.Errorf("got server %q tool %q keyword %q pointer %q; want keyword %q pointer %q", se.Server, se.Tool, se.Keyword, se.Pointer, tc.keyword, tc.pointer)
			}
		})
	}
	if _, _, err := gateToolSchema("s", "t", nil); err == nil {
		t.Error("a missing schema was accepted")
	}
}

// FuzzConvertSchema: convertSchema reads schemas from servers no one here
// controls. It must never panic, must return JSON, and must leave a schema
// the gate already accepts byte for byte as it is (it only rewrites
// keywords outside the vocabulary).
func FuzzConvertSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","if":{"required":["a"]},"then":{"required":["b"]},"else":false}`,
		`{"type":"object","dependentRequired":{"a":["b","c"]},"allOf":[true]}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","dependencies":{"a":{"not":{}}}}`,
		`{"propertyNames":{"type":"string"},"contentMediaType":"x"}`,
		`{"allOf":{"if":true}, "if":1}`,
		`[{"if":{}}]`, `true`, `{"properties":{"a":{"items":[{"if":{"then":{}}}]}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, conversions, err := convertSchema(raw)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("not JSON: %s", out)
		}
		if _, gerr := schema.Compile(raw); gerr == nil && len(conversions) == 0 && !bytes.Equal(out, raw) {
			t.Fatalf("a schema the gate accepts was changed:\n%s\n%s", raw, out)
		}
		// Converting twice changes nothing more: every rewrite removes the
		// keyword it rewrote.
		again, more, err := convertSchema(out)
		if err != nil || len(more) != 0 || !bytes.Equal(again, out) {
			t.Fatalf("second conversion: %v %q\n%s\n%s", err, more, out, again)
		}
	})
}
