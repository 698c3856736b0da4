package lifecycle_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/actors/lifecycle"
)

// -rewrite is scripttest's flag; this test reads it by name so that one
// flag rewrites the scripts and the document alike.
func rewriting() bool {
	f := flag.Lookup("rewrite")
	return f != nil && f.Value.String() == "true"
}

const docPath = "../../docs/run-lifecycle.md"

// TestDiagramIsTheTable: docs/run-lifecycle.md holds the diagram and the
// table Mermaid and Markdown draw from the core's own transitions, so the
// document cannot drift from the code. -rewrite draws them again.
func TestDiagramIsTheTable(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, part := range []struct{ name, body string }{
		{"diagram", "```mermaid\n" + lifecycle.Mermaid() + "```\n"},
		{"table", lifecycle.Markdown()},
	} {
		begin, end := "<!-- begin lifecycle "+part.name+" (generated: go test ./actors/lifecycle -rewrite) -->\n", "<!-- end lifecycle "+part.name+" -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Fatalf("%s: no %q ... %q section", docPath, begin, end)
		}
		got := doc[i+len(begin) : j]
		if got == part.body {
			continue
		}
		if !rewriting() {
			t.Errorf("%s: the %s differs from the core's transitions; run go test ./actors/lifecycle -rewrite\nwant:\n%s", docPath, part.name, part.body)
			continue
		}
		doc = doc[:i+len(begin)] + part.body + doc[j:]
	}
	if rewriting() {
		if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTableCoversEveryStateAndEvent: every state is reached and left, and
// nothing leaves done.
func TestTableCoversEveryStateAndEvent(t *testing.T) {
	reached := map[lifecycle.State]bool{}
	for _, tr := range lifecycle.Table() {
		reached[tr.To] = true
		if strings.HasPrefix(tr.From, "done") && (tr.To != lifecycle.Done || len(tr.Effects) > 0) {
			t.Errorf("done: %s -> %s %v", tr.Event, tr.To, tr.Effects)
		}
	}
	for s := lifecycle.Idle; s <= lifecycle.Done; s++ {
		if !reached[s] && s != lifecycle.Idle {
			t.Errorf("no transition reaches %s", s)
		}
	}
}
