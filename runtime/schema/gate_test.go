package schema

import (
	"errors"
	"strings"
	"testing"
)

// gateError compiles raw and returns its *GateError, failing the test if
// Compile accepted it or returned another kind of error.
func gateError(t *testing.T, raw string) *GateError {
	t.Helper()
	s, err := Compile([]byte(raw))
	if err == nil {
		t.Fatalf("Compile(%s) accepted the schema (hash %s)", raw, s.Hash())
	}
	if !errors.Is(err, ErrGate) {
		t.Fatalf("Compile(%s) error does not match ErrGate: %v", raw, err)
	}
	var ge *GateError
	if !errors.As(err, &ge) {
		t.Fatalf("Compile(%s) error is %T, not *GateError", raw, err)
	}
	if ge.internal {
		t.Fatalf("Compile(%s) panicked inside: %v", raw, err)
	}
	return ge
}

func TestGateRejects(t *testing.T) {
	tests := []struct {
		name    string
		schema  string
		pointer string
		keyword string
	}{
		// Not JSON, or not a schema.
		{"malformed JSON", `{"type":`, "/type", ""},
		{"trailing comma", `{"type":"string",}`, "", ""},
		{"trailing data", `{"type":"string"} {}`, "", ""},
		{"duplicate member", `{"type":"string","type":"integer"}`, "/type", ""},
		{"invalid UTF-8", "{\"title\":\"\xff\"}", "/title", ""},
		{"empty input", ``, "", ""},
		{"root array", `[{"type":"string"}]`, "", ""},
		{"root string", `"string"`, "", ""},
		{"root null", `null`, "", ""},
		{"root number", `1`, "", ""},
		{"subschema number", `{"properties":{"a":1}}`, "/properties/a", "properties"},
		{"subschema null", `{"items":null}`, "/items", "items"},
		{"subschema string in allOf", `{"allOf":["string"]}`, "/allOf/0", "allOf"},
		{"nested too deep", strings.Repeat(`{"not":`, 201) + `true` + strings.Repeat(`}`, 201), strings.Repeat("/not", 200), ""},

		// Unknown and unsupported keywords.
		{"typo minLenght", `{"type":"string","minLenght":3}`, "", "minLenght"},
		{"typo nested", `{"properties":{"a":{"requird":["b"]}}}`, "/properties/a", "requird"},
		{"unknown in $defs", `{"$defs":{"x":{"x-extension":1}}}`, "/$defs/x", "x-extension"},
		{"if", `{"if":{"type":"string"},"then":{"minLength":1}}`, "", "if"},
		{"then alone", `{"then":{}}`, "", "then"},
		{"else alone", `{"else":{}}`, "", "else"},
		{"patternProperties", `{"patternProperties":{"^a":{}}}`, "", "patternProperties"},
		{"propertyNames", `{"propertyNames":{"maxLength":3}}`, "", "propertyNames"},
		{"dependentSchemas", `{"dependentSchemas":{"a":{}}}`, "", "dependentSchemas"},
		{"dependentRequired", `{"dependentRequired":{"a":["b"]}}`, "", "dependentRequired"},
		{"dependencies", `{"dependencies":{"a":["b"]}}`, "", "dependencies"},
		{"unevaluatedProperties", `{"unevaluatedProperties":false}`, "", "unevaluatedProperties"},
		{"unevaluatedItems", `{"unevaluatedItems":false}`, "", "unevaluatedItems"},
		{"contains", `{"contains":{"type":"string"}}`, "", "contains"},
		{"minContains", `{"minContains":1}`, "", "minContains"},
		{"additionalItems", `{"additionalItems":false}`, "", "additionalItems"},
		{"$id at root", `{"$id":"https://example.com/s","type":"string"}`, "", "$id"},
		{"$id nested", `{"properties":{"a":{"$id":"a.json"}}}`, "/properties/a", "$id"},
		{"$anchor", `{"$defs":{"a":{"$anchor":"a"}}}`, "/$defs/a", "$anchor"},
		{"$dynamicRef", `{"$dynamicRef":"#meta"}`, "", "$dynamicRef"},
		{"$dynamicAnchor", `{"$dynamicAnchor":"meta"}`, "", "$dynamicAnchor"},
		{"$vocabulary", `{"$vocabulary":{}}`, "", "$vocabulary"},
		{"contentMediaType", `{"contentMediaType":"application/json"}`, "", "contentMediaType"},

		// Keyword values.
		{"type misspelled", `{"type":"strin"}`, "", "type"},
		{"type number", `{"type":5}`, "", "type"},
		{"type empty array", `{"type":[]}`, "", "type"},
		{"type array with unknown", `{"type":["string","nul"]}`, "", "type"},
		{"type array with duplicate", `{"type":["string","string"]}`, "", "type"},
		{"type array with non-string", `{"type":["string",1]}`, "", "type"},
		{"properties not object", `{"properties":[]}`, "", "properties"},
		{"required string", `{"required":"a"}`, "", "required"},
		{"required non-string element", `{"required":["a",1]}`, "", "required"},
		{"required duplicate", `{"required":["a","a"]}`, "", "required"},
		{"additionalProperties number", `{"additionalProperties":1}`, "/additionalProperties", "additionalProperties"},
		{"items array (tuple form)", `{"items":[{"type":"string"}]}`, "/items", "items"},
		{"prefixItems empty", `{"prefixItems":[]}`, "", "prefixItems"},
		{"prefixItems object", `{"prefixItems":{}}`, "", "prefixItems"},
		{"enum empty", `{"enum":[]}`, "", "enum"},
		{"enum not array", `{"enum":"a"}`, "", "enum"},
		{"allOf empty", `{"allOf":[]}`, "", "allOf"},
		{"anyOf object", `{"anyOf":{"a":{}}}`, "", "anyOf"},
		{"oneOf empty", `{"oneOf":[]}`, "", "oneOf"},
		{"not array", `{"not":[]}`, "/not", "not"},
		{"minimum string", `{"minimum":"1"}`, "", "minimum"},
		{"maximum bool", `{"maximum":true}`, "", "maximum"},
		{"exclusiveMinimum bool (draft-04 form)", `{"minimum":1,"exclusiveMinimum":true}`, "", "exclusiveMinimum"},
		{"exclusiveMaximum null", `{"exclusiveMaximum":null}`, "", "exclusiveMaximum"},
		{"multipleOf zero", `{"multipleOf":0}`, "", "multipleOf"},
		{"multipleOf negative", `{"multipleOf":-0.5}`, "", "multipleOf"},
		{"multipleOf string", `{"multipleOf":"2"}`, "", "multipleOf"},
		{"minLength negative", `{"minLength":-1}`, "", "minLength"},
		{"minLength fraction", `{"minLength":1.5}`, "", "minLength"},
		{"minLength string", `{"minLength":"3"}`, "", "minLength"},
		{"maxLength above 2^53", `{"maxLength":9007199254740992}`, "", "maxLength"},
		{"minItems negative", `{"minItems":-2}`, "", "minItems"},
		{"maxItems fraction", `{"maxItems":0.5}`, "", "maxItems"},
		{"minProperties null", `{"minProperties":null}`, "", "minProperties"},
		{"maxProperties negative", `{"maxProperties":-1}`, "", "maxProperties"},
		{"uniqueItems string", `{"uniqueItems":"yes"}`, "", "uniqueItems"},
		{"pattern number", `{"pattern":5}`, "", "pattern"},
		{"pattern lookahead", `{"pattern":"^(?=a)"}`, "", "pattern"},
		{"pattern lookbehind", `{"pattern":"(?<=a)b"}`, "", "pattern"},
		{"pattern backreference", `{"pattern":"(a)\\1"}`, "", "pattern"},
		{"pattern ECMAScript control escape", `{"pattern":"\\cC"}`, "", "pattern"},
		{"pattern unbalanced", `{"properties":{"a":{"pattern":"(a"}}}`, "/properties/a", "pattern"},
		{"title number", `{"title":1}`, "", "title"},
		{"description object", `{"description":{}}`, "", "description"},
		{"$comment number", `{"$comment":1}`, "", "$comment"},
		{"format number", `{"format":1}`, "", "format"},
		{"examples object", `{"examples":{}}`, "", "examples"},
		{"deprecated string", `{"deprecated":"yes"}`, "", "deprecated"},
		{"readOnly number", `{"readOnly":1}`, "", "readOnly"},
		{"writeOnly null", `{"writeOnly":null}`, "", "writeOnly"},
		{"$defs array", `{"$defs":[]}`, "", "$defs"},
		{"definitions string", `{"definitions":"x"}`, "", "definitions"},
		{"$defs member not a schema", `{"$defs":{"a":"string"}}`, "/$defs/a", "$defs"},
		{"number exponent too large", `{"maximum":1e1001}`, "", "maximum"},
		{"number exponent too large in enum", `{"enum":[1,[2e-99999]]}`, "", "enum"},
		{"number exponent too large in default", `{"default":{"a":1E+5000}}`, "", "default"},
		{"number literal too long", `{"const":` + strings.Repeat("1", 1001) + `}`, "", "const"},

		// Dialects.
		{"$schema draft-04", `{"$schema":"http://json-schema.org/draft-04/schema#"}`, "", "$schema"},
		{"$schema draft 2019-09", `{"$schema":"https://json-schema.org/draft/2019-09/schema"}`, "", "$schema"},
		{"$schema unknown", `{"$schema":"https://example.com/meta"}`, "", "$schema"},
		{"$schema with spaces", `{"$schema":" https://json-schema.org/draft/2020-12/schema"}`, "", "$schema"},
		{"$schema http 2020-12", `{"$schema":"http://json-schema.org/draft/2020-12/schema"}`, "", "$schema"},
		{"$schema not a string", `{"$schema":1}`, "", "$schema"},
		{"nested $schema of another dialect", `{"properties":{"a":{"$schema":"http://json-schema.org/draft-07/schema#"}}}`, "/properties/a", "$schema"},
		{"draft-07 prefixItems", `{"$schema":"http://json-schema.org/draft-07/schema#","prefixItems":[{}]}`, "", "prefixItems"},
		{"draft-07 assertion beside $ref", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{}},"properties":{"x":{"$ref":"#/definitions/a","minLength":5}}}`, "/properties/x", "minLength"},

		// $defs and definitions.
		{"both $defs and definitions", `{"$defs":{"a":{}},"definitions":{"b":{}}}`, "", "definitions"},
		{"both nested", `{"properties":{"p":{"$defs":{},"definitions":{}}}}`, "/properties/p", "definitions"},

		// References.
		{"$ref remote http", `{"$ref":"http://example.com/schema.json"}`, "", "$ref"},
		{"$ref remote https with pointer", `{"properties":{"a":{"$ref":"https://example.com/s.json#/$defs/x"}}}`, "/properties/a", "$ref"},
		{"$ref relative file", `{"$ref":"other.json"}`, "", "$ref"},
		{"$ref urn", `{"$ref":"urn:example:thing"}`, "", "$ref"},
		{"$ref empty string", `{"$ref":"","type":"string"}`, "", "$ref"},
		{"$ref not a string", `{"$ref":1}`, "", "$ref"},
		{"$ref anchor name", `{"$defs":{"a":{}},"$ref":"#a"}`, "", "$ref"},
		{"$ref missing $defs member", `{"$ref":"#/$defs/missing"}`, "", "$ref"},
		{"$ref missing definitions member", `{"definitions":{"a":{}},"$ref":"#/definitions/b"}`, "", "$ref"},
		{"$ref into $defs when only definitions exist", `{"definitions":{"a":{}},"properties":{"x":{"$ref":"#/$defs/a"}}}`, "/properties/x", "$ref"},
		{"$ref to the properties map", `{"properties":{"a":{}},"$ref":"#/properties"}`, "", "$ref"},
		{"$ref to required", `{"required":["a"],"items":{"$ref":"#/required"}}`, "/items", "$ref"},
		{"$ref into const", `{"const":{"type":"string"},"items":{"$ref":"#/const"}}`, "/items", "$ref"},
		{"$ref into default", `{"default":{"x":{}},"items":{"$ref":"#/default/x"}}`, "/items", "$ref"},
		{"$ref into unknown place", `{"properties":{"a":{}},"items":{"$ref":"#/properties/a/b"}}`, "/items", "$ref"},
		{"$ref bad percent-encoding", `{"$defs":{"a":{}},"$ref":"#/$defs/%zz"}`, "", "$ref"},
		{"$ref bad tilde escape", `{"$defs":{"a":{}},"$ref":"#/$defs/~2"}`, "", "$ref"},
		{"$ref array index with leading zero", `{"allOf":[{}],"items":{"$ref":"#/allOf/00"}}`, "/items", "$ref"},
		{"$ref to root slash (property \"\")", `{"properties":{"a":{}},"items":{"$ref":"#/"}}`, "/items", "$ref"},
		{"$ref self loop at root", `{"$ref":"#"}`, "", "$ref"},
		{"$ref self loop in $defs", `{"$defs":{"a":{"$ref":"#/$defs/a"}}}`, "/$defs/a", "$ref"},
		{"$ref mutual loop", `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}}`, "/$defs/a", "$ref"},
		{"$ref loop through anyOf", `{"$defs":{"a":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, "/$defs/a/anyOf/1", "$ref"},
		{"$ref loop through not", `{"not":{"$ref":"#"}}`, "/not", "$ref"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ge := gateError(t, tt.schema)
			if ge.Pointer != tt.pointer || ge.Keyword != tt.keyword {
				t.Errorf("got pointer %q keyword %q, want %q %q (%v)", ge.Pointer, ge.Keyword, tt.pointer, tt.keyword, ge)
			}
			if ge.Reason == "" {
				t.Errorf("empty reason")
			}
		})
	}
}

func TestGateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		schema string
	}{
		{"true", `true`},
		{"false", `false`},
		{"empty object", `{}`},
		{"boolean subschemas", `{"properties":{"a":true,"b":false},"additionalProperties":false,"items":true,"not":false}`},
		{"every annotation", `{"title":"t","description":"d","default":{"a":[1,2.5e10]},"examples":[1,"x",null],"$comment":"c","format":"no-such-format","deprecated":true,"readOnly":false,"writeOnly":false}`},
		{"$schema 2020-12", `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`},
		{"$schema 2020-12 with #", `{"$schema":"https://json-schema.org/draft/2020-12/schema#"}`},
		{"$schema draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a","description":"an annotation beside $ref is fine"}}}`},
		{"$schema draft-07 without #", `{"$schema":"http://json-schema.org/draft-07/schema","type":"string"}`},
		{"nested $schema of the same dialect", `{"properties":{"a":{"$schema":"https://json-schema.org/draft/2020-12/schema"}}}`},
		{"type union", `{"type":["string","null"]}`},
		{"every assertion", `{"type":"object","enum":[{}],"const":{},"required":[],"minimum":0,"maximum":1,"exclusiveMinimum":-1,"exclusiveMaximum":2,"multipleOf":0.5,"minLength":0,"maxLength":9007199254740991,"minItems":0,"maxItems":1.0,"minProperties":0,"maxProperties":3,"uniqueItems":false,"pattern":"^[a-z]+$"}`},
		{"count written with exponent", `{"maxLength":1e3}`},
		{"prefixItems and items", `{"prefixItems":[{"type":"string"},true],"items":false}`},
		{"$ref to root", `{"type":"object","properties":{"child":{"$ref":"#"}}}`},
		{"$ref to $defs", `{"$defs":{"a":{"type":"string"}},"$ref":"#/$defs/a"}`},
		{"$ref to definitions", `{"definitions":{"a":{"type":"string"}},"items":{"$ref":"#/definitions/a"}}`},
		{"$ref to a property schema", `{"properties":{"a":{"type":"string"},"b":{"$ref":"#/properties/a"}}}`},
		{"$ref into allOf", `{"allOf":[{"type":"string"}],"items":{"$ref":"#/allOf/0"}}`},
		{"$ref with escaped pointer", `{"$defs":{"a/b":{"type":"string"},"c~d":{"type":"integer"}},"properties":{"x":{"$ref":"#/$defs/a~1b"},"y":{"$ref":"#/$defs/c~0d"}}}`},
		{"$ref percent-encoded", `{"$defs":{"a b":{"type":"string"}},"$ref":"#/$defs/a%20b"}`},
		{"$ref to property \"\"", `{"properties":{"":{"type":"string"},"a":{"$ref":"#/properties/"}}}`},
		{"$ref beside assertions (2020-12)", `{"$defs":{"a":{"type":"string"}},"$ref":"#/$defs/a","minLength":2}`},
		{"recursive tree", `{"$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"}`},
		{"recursion through anyOf and items", `{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#"}}]}`},
		{"keywords as property names", `{"properties":{"$ref":{"type":"string"},"if":{},"$id":{},"type":{}}}`},
		{"keyword-like data in const", `{"const":{"$ref":"http://example.com","if":1,"$id":"x"}}`},
		{"exponent at the limit", `{"maximum":1e1000,"minimum":-1E-1000}`},
		{"nested 200 deep", strings.Repeat(`{"not":`, 199) + `true` + strings.Repeat(`}`, 199)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Compile([]byte(tt.schema)); err != nil {
				t.Fatalf("Compile: %v", err)
			}
		})
	}
}

func TestGateErrorIsErrGate(t *testing.T) {
	_, err := Compile([]byte(`{"minLength":-1}`))
	if !errors.Is(err, ErrGate) || errors.Is(err, ErrInvalid) {
		t.Fatalf("errors.Is: %v", err)
	}
}

// The rendered text is part of the contract: "schema: <pointer>: <keyword>: <reason>".
func TestGateErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  *GateError
		want string
	}{
		{"keyword", &GateError{Pointer: "/properties/a", Keyword: "minLength", Reason: "must be a non-negative integer, got -1"},
			"schema: /properties/a: minLength: must be a non-negative integer, got -1"},
		{"root", &GateError{Pointer: "", Keyword: "type", Reason: "bad"}, "schema: (root): type: bad"},
		{"no keyword", &GateError{Pointer: "", Reason: "malformed JSON: x"}, "schema: (root): malformed JSON: x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestGateSuggestsKeyword(t *testing.T) {
	tests := []struct{ in, want string }{
		{"minLenght", "minLength"},
		{"requierd", "required"},
		{"additionalproperties", "additionalProperties"},
		{"x-vendor", ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.in); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
