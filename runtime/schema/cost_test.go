package schema

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// exprSchema is an expression grammar whose alternatives share property
// names: the library evaluates every alternative at every level, so its
// work doubles with each level of nesting.
const exprSchema = `{"$defs":{"e":{"oneOf":[
  {"type":"object","properties":{"op":{"const":"add"},"left":{"$ref":"#/$defs/e"},"right":{"$ref":"#/$defs/e"}},"required":["op","left","right"],"additionalProperties":false},
  {"type":"object","properties":{"op":{"const":"mul"},"left":{"$ref":"#/$defs/e"},"right":{"$ref":"#/$defs/e"}},"required":["op","left","right"],"additionalProperties":false},
  {"type":"integer"}]}},"$ref":"#/$defs/e"}`

func expr(depth int) string {
	return strings.Repeat(`{"op":"add","left":`, depth) + "1" + strings.Repeat(`,"right":2}`, depth)
}

func TestEvaluationBudget(t *testing.T) {
	s := mustCompile(t, exprSchema)
	if err := s.Validate([]byte(expr(8))); err != nil {
		t.Fatalf("depth 8: %v", err)
	}
	if !hasIssue(issues(t, s, strings.Replace(expr(8), `"right":2`, `"right":"2"`, 1)), "", "/$defs/e/oneOf", "oneOf") {
		t.Errorf("depth 8 with an error: not refused at the root")
	}
	// Deep enough that the library would take minutes: refused at once.
	start := time.Now()
	got := issues(t, s, expr(30))
	if len(got) != 1 || got[0].Message != tooCostly || got[0].InstancePointer != "" {
		t.Errorf("depth 30: %+v", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("depth 30 took %v", d)
	}
}

// The count must stay below the budget for ordinary large instances.
func TestEvaluationBudgetOrdinaryInstance(t *testing.T) {
	s := mustCompile(t, `{"type":"array","items":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a"]}}`)
	in := "[" + strings.TrimSuffix(strings.Repeat(`{"a":"x","b":1},`, 20000), ",") + "]"
	if err := s.Validate([]byte(in)); err != nil {
		t.Fatalf("20000 items: %v", err)
	}
}

// The count follows the library: a schema and instance whose evaluations
// are known by hand.
func TestEvaluationCount(t *testing.T) {
	tests := []struct {
		name     string
		schema   string
		instance string
		want     int
	}{
		{"scalar", `{"type":"string"}`, `"x"`, 1},
		{"boolean", `true`, `[1,2]`, 1},
		{"allOf and ref", `{"$defs":{"s":{"type":"string"}},"allOf":[{"$ref":"#/$defs/s"},{"minLength":1}]}`, `"x"`, 4},
		{"properties present and missing", `{"properties":{"a":{},"b":{},"c":{"default":1}},"required":["b","c"]}`, `{"a":1}`, 3},
		{"additionalProperties", `{"properties":{"a":{}},"additionalProperties":{"not":true}}`, `{"a":1,"b":2,"c":3}`, 6},
		{"prefixItems and items", `{"prefixItems":[{},{}],"items":{"anyOf":[true,false]}}`, `[1,2,3,4]`, 9},
		{"nested", `{"items":{"items":{}}}`, `[[1,2],[3]]`, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.schema)
			v, jerr := decodeJSON([]byte(tt.instance), maxInstanceDepth, true)
			if jerr != nil {
				t.Fatal(jerr)
			}
			if !s.c.plan.evaluations(v, tt.want) || s.c.plan.evaluations(v, tt.want-1) {
				t.Errorf("count is not %d", tt.want)
			}
		})
	}
}

// doubling is a schema whose definitions each refer twice to the next, n
// levels deep: about 2^(n+2) subschemas for one value (each allOf member
// with its $ref counts twice, as the library evaluates both).
func doubling(n int) string {
	var b strings.Builder
	b.WriteString(`{"$defs":{`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d":{"allOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}},"$ref":"#/$defs/d0"}`, n)
	return b.String()
}

func TestGateRefusesExpansion(t *testing.T) {
	ge := gateError(t, doubling(8)) // 1022 subschemas
	if ge.Pointer != "" || ge.Keyword != "$ref" {
		t.Errorf("got %v", ge)
	}
	s, err := Compile([]byte(doubling(7))) // 510
	if err != nil {
		t.Fatalf("510 subschemas: %v", err)
	}
	if !hasIssue(issues(t, s, `1`), "", "/$defs/d7/type", "type") {
		t.Errorf("not validated")
	}
}

func TestInstanceDepthLimit(t *testing.T) {
	s := mustCompile(t, `{"type":["array","integer"],"items":{"$ref":"#"}}`)
	nested := func(d int) []byte {
		return []byte(strings.Repeat("[", d) + "1" + strings.Repeat("]", d))
	}
	if err := s.Validate(nested(maxInstanceDepth)); err != nil {
		t.Fatalf("%d levels: %v", maxInstanceDepth, err)
	}
	got := issues(t, s, string(nested(maxInstanceDepth+1)))
	if len(got) != 1 || got[0].InstancePointer != strings.Repeat("/0", maxInstanceDepth) || got[0].Keyword != "" {
		t.Errorf("%d levels: %+v", maxInstanceDepth+1, got)
	}
	start := time.Now()
	issues(t, s, strings.Repeat("[", 9000)+`"x"`+strings.Repeat("]", 9000))
	if d := time.Since(start); d > time.Second {
		t.Errorf("9000 levels took %v", d)
	}
}
