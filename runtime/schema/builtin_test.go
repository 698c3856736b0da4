package schema_test

import (
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
