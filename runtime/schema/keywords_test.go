package schema

import (
	"errors"
	"testing"
)

// mustCompile compiles a schema the test knows to be good.
func mustCompile(t testing.TB, raw string) *Schema {
	t.Helper()
	s, err := Compile([]byte(raw))
	if err != nil {
		t.Fatalf("Compile(%s): %v", raw, err)
	}
	return s
}

// issues validates and returns the issues, failing unless the instance is
// invalid with a *ValidationError.
func issues(t *testing.T, s *Schema, instance string) []Issue {
	t.Helper()
	err := s.Validate([]byte(instance))
	if err == nil {
		t.Fatalf("Validate(%s) accepted the instance", instance)
	}
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrGate) {
		t.Fatalf("Validate(%s): error does not match ErrInvalid: %v", instance, err)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate(%s): error is %T", instance, err)
	}
	if len(ve.Issues) == 0 {
		t.Fatalf("Validate(%s): no issues", instance)
	}
	return ve.Issues
}

// bad is an invalid instance and the issue it must produce.
type bad struct {
	instance        string
	instancePointer string
	schemaPointer   string
	keyword         string
}

// C40: every keyword Cairn supports, each with instances it accepts and
// refuses (and the pointer and keyword a refusal names).
func TestKeywords(t *testing.T) {
	tests := []struct {
		name    string
		schema  string
		valid   []string
		invalid []bad
	}{
		{"type string", `{"type":"string"}`,
			[]string{`""`, `"x"`},
			[]bad{{`1`, "", "/type", "type"}, {`null`, "", "/type", "type"}, {`["x"]`, "", "/type", "type"}}},
		{"type integer", `{"type":"integer"}`,
			[]string{`1`, `-7`, `1.0`, `1e2`, `123456789012345678901234567890`},
			[]bad{{`1.5`, "", "/type", "type"}, {`"1"`, "", "/type", "type"}}},
		{"type number", `{"type":"number"}`,
			[]string{`1`, `1.5`, `-2e-3`},
			[]bad{{`"1"`, "", "/type", "type"}, {`true`, "", "/type", "type"}}},
		{"type boolean null array object", `{"type":["boolean","null","array","object"]}`,
			[]string{`true`, `null`, `[]`, `{}`},
			[]bad{{`0`, "", "/type", "type"}, {`""`, "", "/type", "type"}}},
		{"type union", `{"type":["string","null"]}`,
			[]string{`"a"`, `null`},
			[]bad{{`1`, "", "/type", "type"}, {`false`, "", "/type", "type"}}},
		{"properties", `{"properties":{"a":{"type":"string"},"b/c":{"type":"integer"}}}`,
			[]string{`{}`, `{"a":"x"}`, `{"b/c":1,"z":null}`, `"not an object"`},
			[]bad{{`{"a":1}`, "/a", "/properties/a/type", "type"}, {`{"b/c":"x"}`, "/b~1c", "/properties/b~1c/type", "type"}}},
		{"required", `{"required":["a","b"]}`,
			[]string{`{"a":1,"b":null}`, `[]`, `"x"`},
			[]bad{{`{"a":1}`, "", "/required", "required"}, {`{}`, "", "/required", "required"}}},
		{"required with property schema", `{"properties":{"a":{"type":"string"}},"required":["a"]}`,
			[]string{`{"a":"x"}`},
			[]bad{{`{}`, "", "/required", "required"}}},
		{"additionalProperties false", `{"properties":{"a":{}},"additionalProperties":false}`,
			[]string{`{}`, `{"a":[1]}`},
			[]bad{{`{"a":1,"b":2}`, "/b", "/additionalProperties", "additionalProperties"}}},
		{"additionalProperties true", `{"properties":{"a":{}},"additionalProperties":true}`,
			[]string{`{"a":1,"b":2}`},
			nil},
		{"additionalProperties schema", `{"properties":{"a":{}},"additionalProperties":{"type":"integer"}}`,
			[]string{`{"a":"x","b":2}`},
			[]bad{{`{"b":"x"}`, "/b", "/additionalProperties/type", "type"}}},
		{"items", `{"items":{"type":"integer"}}`,
			[]string{`[]`, `[1,2,3]`, `{"not":"an array"}`},
			[]bad{{`[1,"x",3]`, "/1", "/items/type", "type"}}},
		{"items false", `{"items":false}`,
			[]string{`[]`},
			[]bad{{`[1]`, "/0", "/items", "false"}}},
		{"prefixItems", `{"prefixItems":[{"type":"string"},{"type":"integer"}]}`,
			[]string{`[]`, `["a"]`, `["a",1]`, `["a",1,true]`},
			[]bad{{`[1]`, "/0", "/prefixItems/0/type", "type"}, {`["a","b"]`, "/1", "/prefixItems/1/type", "type"}}},
		{"prefixItems with items", `{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}}`,
			[]string{`["a",1,2]`},
			[]bad{{`["a",1,"b"]`, "/2", "/items/type", "type"}}},
		{"prefixItems closed tuple", `{"prefixItems":[{"type":"string"}],"items":false}`,
			[]string{`["a"]`},
			[]bad{{`["a","b"]`, "/1", "/items", "false"}}},
		{"enum", `{"enum":["a",1,null,{"k":[1]}]}`,
			[]string{`"a"`, `1`, `1.0`, `null`, `{"k":[1.00]}`},
			[]bad{{`"b"`, "", "/enum", "enum"}, {`{"k":[2]}`, "", "/enum", "enum"}, {`true`, "", "/enum", "enum"}, {`"1"`, "", "/enum", "enum"}}},
		{"const", `{"const":{"a":[1,"x"]}}`,
			[]string{`{"a":[1,"x"]}`, `{"a":[1.0,"x"]}`},
			[]bad{{`{"a":[1]}`, "", "/const", "const"}, {`{"a":[1,"x"],"b":1}`, "", "/const", "const"}}},
		{"const null", `{"const":null}`,
			[]string{`null`},
			[]bad{{`0`, "", "/const", "const"}, {`false`, "", "/const", "const"}}},
		{"allOf", `{"allOf":[{"type":"string"},{"minLength":2}]}`,
			[]string{`"ab"`},
			[]bad{{`"a"`, "", "/allOf/1/minLength", "minLength"}, {`1`, "", "/allOf/0/type", "type"}}},
		{"anyOf", `{"anyOf":[{"type":"string"},{"type":"integer"}]}`,
			[]string{`"a"`, `1`},
			[]bad{{`1.5`, "", "/anyOf", "anyOf"}}},
		{"oneOf", `{"oneOf":[{"type":"integer"},{"minimum":2}]}`,
			[]string{`1`, `2.5`},
			[]bad{{`3`, "", "/oneOf", "oneOf"}, {`1.5`, "", "/oneOf", "oneOf"}}},
		{"not", `{"not":{"type":"string"}}`,
			[]string{`1`, `null`},
			[]bad{{`"a"`, "", "/not", "not"}}},
		{"minimum", `{"minimum":2.5}`,
			[]string{`2.5`, `3`, `"strings are not numbers"`},
			[]bad{{`2.4999999999999999999`, "", "/minimum", "minimum"}}},
		{"maximum", `{"maximum":-1}`,
			[]string{`-1`, `-1e10`},
			[]bad{{`-0.99`, "", "/maximum", "maximum"}}},
		{"exclusiveMinimum", `{"exclusiveMinimum":0}`,
			[]string{`1e-300`},
			[]bad{{`0`, "", "/exclusiveMinimum", "exclusiveMinimum"}, {`-0.0`, "", "/exclusiveMinimum", "exclusiveMinimum"}}},
		{"exclusiveMaximum", `{"exclusiveMaximum":10}`,
			[]string{`9.999`},
			[]bad{{`10`, "", "/exclusiveMaximum", "exclusiveMaximum"}, {`10.0`, "", "/exclusiveMaximum", "exclusiveMaximum"}}},
		{"multipleOf", `{"multipleOf":0.01}`,
			[]string{`0.07`, `0`, `-12.34`, `1e2`, `"x"`},
			[]bad{{`0.071`, "", "/multipleOf", "multipleOf"}, {`1e-3`, "", "/multipleOf", "multipleOf"}}},
		{"minLength", `{"minLength":3}`,
			[]string{`"abc"`, `"日本語"`, `5`},
			[]bad{{`"ab"`, "", "/minLength", "minLength"}, {`"日本"`, "", "/minLength", "minLength"}}},
		{"maxLength", `{"maxLength":2}`,
			[]string{`""`, `"ab"`, `"😀😀"`},
			[]bad{{`"abc"`, "", "/maxLength", "maxLength"}, {`"😀😀😀"`, "", "/maxLength", "maxLength"}}},
		{"minItems", `{"minItems":2}`,
			[]string{`[1,2]`, `"x"`},
			[]bad{{`[1]`, "", "/minItems", "minItems"}}},
		{"maxItems", `{"maxItems":1}`,
			[]string{`[]`, `[[1,2,3]]`},
			[]bad{{`[1,2]`, "", "/maxItems", "maxItems"}}},
		{"minProperties", `{"minProperties":1}`,
			[]string{`{"a":null}`, `[]`},
			[]bad{{`{}`, "", "/minProperties", "minProperties"}}},
		{"maxProperties", `{"maxProperties":1}`,
			[]string{`{}`, `{"a":{"b":1,"c":2}}`},
			[]bad{{`{"a":1,"b":2}`, "", "/maxProperties", "maxProperties"}}},
		{"uniqueItems", `{"uniqueItems":true}`,
			[]string{`[]`, `[1,"1",[1],{"a":1},{"a":2}]`},
			[]bad{{`[1,2,1.0]`, "", "/uniqueItems", "uniqueItems"}, {`[{"a":1,"b":2},{"b":2,"a":1}]`, "", "/uniqueItems", "uniqueItems"}}},
		{"uniqueItems false", `{"uniqueItems":false}`,
			[]string{`[1,1]`},
			nil},
		{"pattern", `{"pattern":"^[a-z]+-[0-9]{2}$"}`,
			[]string{`"abc-12"`, `12`},
			[]bad{{`"abc-1"`, "", "/pattern", "pattern"}, {`"ABC-12"`, "", "/pattern", "pattern"}}},
		{"pattern is unanchored", `{"pattern":"b"}`,
			[]string{`"abc"`},
			[]bad{{`"ac"`, "", "/pattern", "pattern"}}},
		{"$ref to $defs", `{"$defs":{"pos":{"type":"integer","minimum":1}},"properties":{"n":{"$ref":"#/$defs/pos"}}}`,
			[]string{`{"n":1}`},
			[]bad{{`{"n":0}`, "/n", "/$defs/pos/minimum", "minimum"}}},
		{"$ref to definitions", `{"definitions":{"s":{"type":"string"}},"items":{"$ref":"#/definitions/s"}}`,
			[]string{`["a"]`},
			[]bad{{`["a",1]`, "/1", "/definitions/s/type", "type"}}},
		{"$ref with sibling assertion", `{"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":1}`,
			[]string{`"a"`},
			[]bad{{`"ab"`, "", "/maxLength", "maxLength"}, {`1`, "", "/$defs/s/type", "type"}}},
		{"$ref percent-encoded and escaped", `{"$defs":{"a b/c":{"type":"string"}},"$ref":"#/$defs/a%20b~1c"}`,
			[]string{`"x"`},
			[]bad{{`1`, "", "/$defs/a b~1c/type", "type"}}},
		{"true schema", `true`, []string{`1`, `null`, `{"a":[]}`}, nil},
		{"false schema", `false`, nil, []bad{{`1`, "", "", "false"}, {`null`, "", "", "false"}}},
		{"false property", `{"properties":{"a":false}}`,
			[]string{`{}`, `{"b":1}`},
			[]bad{{`{"a":1}`, "/a", "/properties/a", "false"}}},
		{"draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"$ref":"#/definitions/s"}},"definitions":{"s":{"type":"string","maxLength":2}},"additionalProperties":false}`,
			[]string{`{"a":"ab"}`, `{}`},
			[]bad{{`{"a":"abc"}`, "/a", "/definitions/s/maxLength", "maxLength"}, {`{"b":1}`, "/b", "/additionalProperties", "additionalProperties"}}},
		{"format is an annotation", `{"type":"string","format":"email"}`,
			[]string{`"not an email"`, `""`},
			nil},
		{"annotations change nothing", `{"title":"t","description":"d","default":5,"examples":["x"],"$comment":"c","deprecated":true,"readOnly":true,"writeOnly":true}`,
			[]string{`1`, `"x"`, `null`},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.schema)
			for _, v := range tt.valid {
				if err := s.Validate([]byte(v)); err != nil {
					t.Errorf("Validate(%s): %v", v, err)
				}
			}
			for _, b := range tt.invalid {
				got := issues(t, s, b.instance)
				if !hasIssue(got, b.instancePointer, b.schemaPointer, b.keyword) {
					t.Errorf("Validate(%s): want issue %q %q %q, got %+v", b.instance, b.instancePointer, b.schemaPointer, b.keyword, got)
				}
			}
		})
	}
}

func hasIssue(got []Issue, instancePointer, schemaPointer, keyword string) bool {
	for _, is := range got {
		if is.InstancePointer == instancePointer && is.SchemaPointer == schemaPointer && is.Keyword == keyword {
			if is.Message == "" {
				return false
			}
			return true
		}
	}
	return false
}

// C40: local refs and recursive definitions.
func TestRecursiveRef(t *testing.T) {
	tree := mustCompile(t, `{
		"$defs": {"node": {"type": "object",
			"properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
			"required": ["value"], "additionalProperties": false}},
		"$ref": "#/$defs/node"}`)
	if err := tree.Validate([]byte(`{"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4,"children":[]}]}]}`)); err != nil {
		t.Fatalf("valid tree: %v", err)
	}
	got := issues(t, tree, `{"value":1,"children":[{"value":2},{"value":3,"children":[{"value":"four"},{"x":1}]}]}`)
	want := []Issue{
		{InstancePointer: "/children/1/children/0/value", SchemaPointer: "/$defs/node/properties/value/type", Keyword: "type"},
		{InstancePointer: "/children/1/children/1", SchemaPointer: "/$defs/node/required", Keyword: "required"},
		{InstancePointer: "/children/1/children/1/x", SchemaPointer: "/$defs/node/additionalProperties", Keyword: "additionalProperties"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d issues %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].InstancePointer != want[i].InstancePointer || got[i].SchemaPointer != want[i].SchemaPointer || got[i].Keyword != want[i].Keyword {
			t.Errorf("issue %d: got %+v, want %+v", i, got[i], want[i])
		}
	}

	// Recursion to the root.
	list := mustCompile(t, `{"type":"object","properties":{"next":{"$ref":"#"},"n":{"type":"integer"}}}`)
	if err := list.Validate([]byte(`{"n":1,"next":{"n":2,"next":{"n":3}}}`)); err != nil {
		t.Fatalf("valid list: %v", err)
	}
	if !hasIssue(issues(t, list, `{"n":1,"next":{"n":2,"next":{"n":"3"}}}`), "/next/next/n", "/properties/n/type", "type") {
		t.Errorf("deep error not reported at its place")
	}
}

func TestMalformedInstance(t *testing.T) {
	s := mustCompile(t, `{"type":"object"}`)
	for _, in := range []string{``, `{`, `{"a":1,}`, `{"a":1}{}`, `{"a":1,"a":2}`, "\"\xff\"", `NaN`, `'x'`} {
		got := issues(t, s, in)
		if len(got) != 1 || got[0].InstancePointer != "" || got[0].Keyword != "" || got[0].SchemaPointer != "" {
			t.Errorf("Validate(%q): got %+v, want one issue at the root", in, got)
		}
	}
}
