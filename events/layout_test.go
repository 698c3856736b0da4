package events

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The log's subject layout and its stream's default name have one
// definition, this package: no other
// package of the repository (tests and benchmarks included) spells a
// subject, or a part of one, in a string literal or builds one from
// Prefix. A reader that needs a session, a run or a kind from a subject
// calls ParseSubject; a writer or a filter calls a builder here.
func TestSubjectsAreBuiltHere(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository root is not the parent of events/: %v", err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "events" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err == nil && s == DefaultStream && !strings.HasSuffix(path, "_test.go") {
					t.Errorf("%s: %q names the log's stream by hand; use events.StreamName (its configured name) or events.DefaultStream", fset.Position(n.Pos()), s)
				}
				if err == nil && (strings.Contains(s, Prefix+".sess") || strings.HasPrefix(s, ".sess.") || strings.Contains(s, ".run.*.") || strings.HasSuffix(s, ".c.done") || strings.HasSuffix(s, ".c.step")) {
					t.Errorf("%s: %q spells a subject of the log by hand; use a builder of events/ (or ParseSubject)", fset.Position(n.Pos()), s)
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "events" && n.Sel.Name == "Prefix" {
					t.Errorf("%s: events.Prefix used outside events/ to build a subject; use a builder of events/", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files; the walk missed the repository", checked)
	}
}
