package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// These tests are about the rendered text, which the model reads.

func TestValidationErrorText(t *testing.T) {
	s := mustCompile(t, `{
		"type": "object",
		"properties": {
			"a": {"type": "object", "properties": {"b": {"type": "string", "minLength": 3}}},
			"n": {"type": "integer", "maximum": 10},
			"tags": {"type": "array", "items": {"enum": ["x", "y"]}, "uniqueItems": true}
		},
		"required": ["a", "id"],
		"additionalProperties": false
	}`)
	err := s.Validate([]byte(`{"a":{"b":"xy"},"n":11.5,"tags":["x","z","x"],"extra":{"k":[1]}}`))
	want := `schema: instance is invalid:
(root): required: missing required property "id" (schema /required)
/a/b: minLength: string is shorter than 3 characters (has 2) (schema /properties/a/properties/b/minLength)
/extra: additionalProperties: property "extra" is not allowed (schema /additionalProperties)
/n: maximum: must be <= 10, got 11.5 (schema /properties/n/maximum)
/n: type: expected integer, got number (schema /properties/n/type)
/tags: uniqueItems: items 0 and 2 are equal; items must be unique (schema /properties/tags/uniqueItems)
/tags/1: enum: must be one of "x", "y", got "z" (schema /properties/tags/items/enum)`
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}

func TestValidationErrorTextCapped(t *testing.T) {
	s := mustCompile(t, `{"items":{"type":"string"}}`)
	in := "[" + strings.TrimSuffix(strings.Repeat("1,", 25), ",") + "]"
	err := s.Validate([]byte(in))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Issues) != 25 {
		t.Fatalf("want 25 issues: %v", err)
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 1+maxShownIssues+1 || lines[len(lines)-1] != "and 5 more" {
		t.Errorf("got %d lines, last %q", len(lines), lines[len(lines)-1])
	}
	// Sorted by instance pointer as strings: /0, /1, /10, /11, ...
	if lines[1] != "/0: type: expected string, got integer (schema /items/type)" || !strings.HasPrefix(lines[3], "/10: ") {
		t.Errorf("order: %q, %q", lines[1], lines[3])
	}
}

func TestValidationErrorTextMalformed(t *testing.T) {
	err := mustCompile(t, `true`).Validate([]byte(`{"a":`))
	if err == nil || err.Error() != "schema: instance is invalid:\n(root): malformed JSON: unexpected EOF" {
		t.Errorf("got %q", err)
	}
}

func TestValidationErrorTextOneLinePerIssue(t *testing.T) {
	s := mustCompile(t, `{"additionalProperties":false}`)
	err := s.Validate([]byte(`{"a\nb":1}`))
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("a property name broke the line: %q", err)
	}
}

func TestIssuesSortedAndDeduplicated(t *testing.T) {
	// Two references to one definition fail the same way: one issue.
	s := mustCompile(t, `{"$defs":{"s":{"type":"string"}},"allOf":[{"$ref":"#/$defs/s"},{"$ref":"#/$defs/s"}],"minimum":5}`)
	got := issues(t, s, `1`)
	want := []Issue{
		{InstancePointer: "", SchemaPointer: "/$defs/s/type", Keyword: "type", Message: "expected string, got integer"},
		{InstancePointer: "", SchemaPointer: "/minimum", Keyword: "minimum", Message: "must be >= 5, got 1"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestAlternativesReported(t *testing.T) {
	// No alternative plainly mismatched: all of them are listed.
	s := mustCompile(t, `{"anyOf":[{"type":"string","minLength":2},{"type":"string","pattern":"^[0-9]+$"}]}`)
	got := issues(t, s, `"a"`)
	for _, w := range [][3]string{{"", "/anyOf", "anyOf"}, {"", "/anyOf/0/minLength", "minLength"}, {"", "/anyOf/1/pattern", "pattern"}} {
		if !hasIssue(got, w[0], w[1], w[2]) {
			t.Errorf("missing %v in %+v", w, got)
		}
	}
	// An alternative of another type is left out when another one fits.
	s = mustCompile(t, `{"anyOf":[{"type":"string","minLength":2},{"type":"integer"}]}`)
	got = issues(t, s, `"a"`)
	if len(got) != 2 || !hasIssue(got, "", "/anyOf/0/minLength", "minLength") {
		t.Errorf("type mismatch kept: %+v", got)
	}
	// When every alternative mismatches, all are listed.
	got = issues(t, s, `null`)
	if len(got) != 3 {
		t.Errorf("all mismatched: %+v", got)
	}
	// A discriminator: only the alternative whose const matched.
	s = mustCompile(t, `{"oneOf":[
		{"properties":{"kind":{"const":"a"},"x":{"type":"string"}},"required":["kind"]},
		{"properties":{"kind":{"enum":["b","c"]},"y":{"type":"integer"}},"required":["kind","y"]}]}`)
	got = issues(t, s, `{"kind":"a","x":1}`)
	if len(got) != 2 || !hasIssue(got, "/x", "/oneOf/0/properties/x/type", "type") {
		t.Errorf("discriminated: %+v", got)
	}
	// A discriminator behind $refs.
	s = mustCompile(t, `{"oneOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/b"}],"$defs":{
		"a":{"properties":{"kind":{"const":"a"},"x":{"type":"string"}},"required":["kind"]},
		"b":{"properties":{"kind":{"const":"b"},"x":{"type":"integer"}},"required":["kind"]}}}`)
	got = issues(t, s, `{"kind":"b","x":"s"}`)
	if len(got) != 2 || !hasIssue(got, "/x", "/$defs/b/properties/x/type", "type") {
		t.Errorf("discriminated behind refs: %+v", got)
	}
	// oneOf matching twice: one issue naming the matches.
	s = mustCompile(t, `{"oneOf":[{"type":"integer"},{"minimum":0}]}`)
	got = issues(t, s, `1`)
	if len(got) != 1 || got[0].Keyword != "oneOf" || got[0].Message != "value matches alternatives 0, 1; exactly one must match" {
		t.Errorf("oneOf twice: %+v", got)
	}
	// A passing anyOf reports nothing of its failing alternatives.
	s = mustCompile(t, `{"anyOf":[{"type":"string"},{"type":"integer"}],"maximum":0}`)
	got = issues(t, s, `1`)
	if len(got) != 1 || got[0].Keyword != "maximum" {
		t.Errorf("passing anyOf: %+v", got)
	}
}
