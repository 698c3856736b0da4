package schema_test

import (
	"encoding/json"
	"testing"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/schema"
)

// The run_js tool's arguments, checked on every call, take the quick
// check: a keyword added to its schema that quick does not know would send
// every call back through the library.
func TestRunJSArgumentsTakeTheQuickCheck(t *testing.T) {
	s, err := schema.Compile([]byte(jstool.InputSchema))
	if err != nil {
		t.Fatal(err)
	}
	if !schema.HasQuick(s) {
		t.Fatalf("run_js's input schema has no quick check: %s", jstool.InputSchema)
	}
}

// The run loop reads run_js's code from the value ValidateValue checked
// instead of decoding the arguments again: it must be the string
// encoding/json reads, escapes and all, and a refused value gives none.
func TestValidateValueGivesWhatJSONReads(t *testing.T) {
	s, err := schema.Compile([]byte(jstool.InputSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{
		`{"code":"return 1"}`,
		`{"code":"return \"\u00e9\\n\ud83d\ude00\" + '\t'"}`,
		`{"code":"a\u2028b\/c"}`,
		` { "code" : "x" } `,
	} {
		v, err := s.ValidateValue([]byte(args))
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		var want jstool.Args
		if err := json.Unmarshal([]byte(args), &want); err != nil {
			t.Fatal(err)
		}
		if got, _ := v.(map[string]any)["code"].(string); got != want.Code {
			t.Errorf("%s: code %q, encoding/json reads %q", args, got, want.Code)
		}
	}
	for _, args := range []string{`{"code":""}`, `{"code":1}`, `{"code":"x","more":1}`, `{"code":"\xff"}`, `[]`} {
		if v, err := s.ValidateValue([]byte(args)); err == nil || v != nil {
			t.Errorf("%s: got %v, %v; want no value and an error", args, v, err)
		}
	}
}
