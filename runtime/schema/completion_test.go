package schema

import (
	"bytes"
	"errors"
	"testing"
)

func TestCompletionSchema(t *testing.T) {
	contract := `{
		"type": "object",
		"properties": {
			"answer": {"$ref": "#/$defs/text"},
			"sources": {"type": "array", "items": {"$ref": "#/$defs/source"}, "minItems": 1}
		},
		"required": ["answer", "sources"],
		"additionalProperties": false,
		"$defs": {
			"text": {"type": "string", "minLength": 1},
			"source": {"type": "object", "properties": {"url": {"$ref": "#/$defs/text"}, "cites": {"$ref": "#/$defs/source"}}, "required": ["url"]}
		}
	}`
	out := mustCompile(t, contract)
	cs, err := CompletionSchema(out)
	if err != nil {
		t.Fatalf("CompletionSchema: %v", err)
	}
	if !cs.IsObjectType() {
		t.Errorf("the completion schema's top level is not type object")
	}
	tests := []struct {
		name     string
		instance string
		valid    bool
	}{
		{"output", `{"type":"output","output":{"answer":"42","sources":[{"url":"u"}]}}`, true},
		{"output with recursive source", `{"type":"output","output":{"answer":"42","sources":[{"url":"u","cites":{"url":"v"}}]}}`, true},
		{"needs_input", `{"type":"needs_input","question":"Which year?"}`, true},
		{"needs_input unicode question", `{"type":"needs_input","question":"¿Qué año?"}`, true},

		{"output breaks its contract", `{"type":"output","output":{"answer":"","sources":[{"url":"u"}]}}`, false},
		{"output breaks a nested ref", `{"type":"output","output":{"answer":"a","sources":[{"url":"u","cites":{"url":""}}]}}`, false},
		{"output extra property in contract", `{"type":"output","output":{"answer":"a","sources":[{"url":"u"}],"x":1}}`, false},
		{"output missing", `{"type":"output"}`, false},
		{"output null", `{"type":"output","output":null}`, false},
		{"question missing", `{"type":"needs_input"}`, false},
		{"question empty", `{"type":"needs_input","question":""}`, false},
		{"question blank", `{"type":"needs_input","question":" \t\n"}`, false},
		{"question not a string", `{"type":"needs_input","question":["a"]}`, false},
		{"mixed: output with question", `{"type":"output","output":{"answer":"a","sources":[{"url":"u"}]},"question":"q"}`, false},
		{"mixed: needs_input with output", `{"type":"needs_input","question":"q","output":{"answer":"a","sources":[{"url":"u"}]}}`, false},
		{"wrong type", `{"type":"done","output":{"answer":"a","sources":[{"url":"u"}]}}`, false},
		{"type missing", `{"output":{"answer":"a","sources":[{"url":"u"}]}}`, false},
		{"extra property", `{"type":"needs_input","question":"q","note":"x"}`, false},
		{"empty object", `{}`, false},
		{"not an object", `"output"`, false},
		{"the bare output", `{"answer":"a","sources":[{"url":"u"}]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := cs.Validate([]byte(tt.instance))
			if tt.valid && err != nil {
				t.Errorf("refused: %v", err)
			}
			if !tt.valid && !errors.Is(err, ErrInvalid) {
				t.Errorf("accepted (err %v)", err)
			}
		})
	}

	// The issue lands where the output broke its contract, behind the
	// rewritten $ref, and the needs_input alternative (whose "type" const
	// failed) is not reported.
	got := issues(t, cs, `{"type":"output","output":{"answer":"","sources":[{"url":"u"}]}}`)
	want := []Issue{
		{InstancePointer: "", SchemaPointer: "/oneOf", Keyword: "oneOf"},
		{InstancePointer: "/output/answer", SchemaPointer: "/oneOf/0/properties/output/$defs/text/minLength", Keyword: "minLength"},
	}
	if len(got) != len(want) {
		t.Fatalf("issues %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].InstancePointer != want[i].InstancePointer || got[i].SchemaPointer != want[i].SchemaPointer || got[i].Keyword != want[i].Keyword {
			t.Errorf("issue %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The embedded contract is the output schema, with only the $ref pointers
// prefixed: undoing the prefix gives back the output's canonical form.
func TestCompletionSchemaEmbedsTheContract(t *testing.T) {
	for _, contract := range []string{
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"},"self":{"$ref":"#"}},"$defs":{"x":{"type":"string","description":"a \"quoted\" é"}}}`,
		`{"type":"object","properties":{"$ref":{"const":{"$ref":"#/not-a-ref"}},"b":{"$ref":"#/properties/%24ref"}}}`,
		`{"type":"number","multipleOf":0.01,"maximum":12345678901234567890.5}`,
		`true`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"type":"string"}},"$ref":"#/definitions/a"}`,
	} {
		t.Run(contract, func(t *testing.T) {
			out := mustCompile(t, contract)
			cs, err := CompletionSchema(out)
			if err != nil {
				t.Fatalf("CompletionSchema: %v", err)
			}
			embedded, ok := lookup(cs.c.doc, []string{"oneOf", "0", "properties", "output"})
			if !ok {
				t.Fatalf("no contract at %s", outputPointer)
			}
			back := appendCanonical(nil, unprefixRefs(t, embedded))
			if !bytes.Equal(back, out.Canonical()) {
				t.Errorf("embedded contract differs:\n got %s\nwant %s", back, out.Canonical())
			}
		})
	}
}

// unprefixRefs undoes rewriteRefs, checking every $ref carries the prefix.
func unprefixRefs(t *testing.T, v any) any {
	t.Helper()
	obj, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, val := range obj {
		switch vocabulary[k].shape {
		case schemaShape:
			out[k] = unprefixRefs(t, val)
		case schemaListShape:
			var l []any
			for _, e := range val.([]any) {
				l = append(l, unprefixRefs(t, e))
			}
			out[k] = l
		case schemaMapShape:
			m := map[string]any{}
			for n, e := range val.(map[string]any) {
				m[n] = unprefixRefs(t, e)
			}
			out[k] = m
		default:
			if k == "$ref" {
				ref := val.(string)
				if !bytes.HasPrefix([]byte(ref), []byte("#"+outputPointer)) {
					t.Errorf("$ref %q lacks the prefix", ref)
				}
				val = "#" + ref[len("#"+outputPointer):]
			}
			out[k] = val
		}
	}
	return out
}

func TestCompletionSchemaDialect(t *testing.T) {
	out := mustCompile(t, `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	cs, err := CompletionSchema(out)
	if err != nil {
		t.Fatalf("CompletionSchema: %v", err)
	}
	if err := cs.Validate([]byte(`{"type":"output","output":{"n":1}}`)); err != nil {
		t.Errorf("valid: %v", err)
	}
	if err := cs.Validate([]byte(`{"type":"output","output":{"n":"1"}}`)); err == nil {
		t.Errorf("invalid output accepted")
	}
}

func TestCompletionSchemaFalseContract(t *testing.T) {
	cs, err := CompletionSchema(mustCompile(t, `false`))
	if err != nil {
		t.Fatalf("CompletionSchema: %v", err)
	}
	if err := cs.Validate([]byte(`{"type":"output","output":1}`)); err == nil {
		t.Errorf("output accepted by a false contract")
	}
	if err := cs.Validate([]byte(`{"type":"needs_input","question":"?"}`)); err != nil {
		t.Errorf("needs_input: %v", err)
	}
}

func TestCompletionSchemaNil(t *testing.T) {
	if _, err := CompletionSchema(nil); !errors.Is(err, ErrGate) {
		t.Errorf("CompletionSchema(nil): %v", err)
	}
}
