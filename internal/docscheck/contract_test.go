package docscheck

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The run contract has clauses C1..C42 and D1..D6. Raising a bound is a
// deliberate change of the contract, made together with the new clause in
// docs/contract.md, never a way to silence a citation this test reports.
const (
	contractLastC = 42
	contractLastD = 6
	contractDoc   = "docs/contract.md"
)

// TestContract holds docs/contract.md to the code: every clause is defined
// once, in order, with a statement and the tests that hold it; each of
// those tests exists; and every clause the repository's Go code cites
// (comments, strings, test names) is one the document defines. A clause
// nobody can look up, or a test that was renamed away, makes the contract
// a promise no one checks.
func TestContract(t *testing.T) {
	root := repoRoot(t)
	problems, err := contractProblems(root, contractLastC, contractLastD)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestContractCheckerFindsBrokenTables runs the checker on a repository made
// for it, with one of each fault, so that a checker that reports nothing
// cannot pass for a contract that is whole.
func TestContractCheckerFindsBrokenTables(t *testing.T) {
	root := t.TempDir()
	write := writer(t, root)
	// The clauses beyond the contract are spelled in pieces: written whole,
	// they would be citations in this file, which TestContract reads too.
	d9, c43 := "D"+"9", "C"+"43"
	write("go.mod", "module example.com/m\n")
	write("suite/suite.go", strings.Join([]string{
		"package suite",
		"",
		"// Names are the subtests Run runs (C1).",
		`var Names = []string{"C1_Fresh", "with spaces"}`,
	}, "\n"))
	write("pkg/pkg_test.go", strings.Join([]string{
		"package pkg",
		"",
		"import (",
		"\t\"testing\"",
		"",
		"\t_ \"example.com/m/suite\"",
		")",
		"",
		"func TestC1_Holds(t *testing.T) {}",
		"func TestC2_Holds(t *testing.T) {}",
		"func TestNotATest(b *testing.B)  {}",
		"",
		"// C3 is cited here, and 0xC1 and ABC12 are not citations; " + d9 + " is (" + d9 + ").",
		"func TestC4_Holds(t *testing.T) { t.Fatal(\"broken (" + c43 + ")\") }",
	}, "\n"))
	write("docs/contract.md", strings.Join([]string{
		"# Contract",
		"",
		"### C1. One",
		"",
		"The first.",
		"",
		"Held by: `pkg.TestC1_Holds`, `pkg.TestC1_Holds/C1_Fresh`, `pkg.TestC1_Holds/with_spaces`.",
		"",
		"### C3. Three",
		"",
		"Held by: `pkg.TestC2_Holds`, pkg.TestC1_Holds.",
		"",
		"### C2. Two",
		"",
		"The second.",
		"",
		"Held by: `pkg.TestGone`, `pkg.TestNotATest`, `nowhere.TestC1_Holds`,",
		"`pkg.TestC1_Holds/NoSuchSubtest`, `pkg.TestC1_Holds`, `pkg.TestC1_Holds`, `../pkg.TestC1_Holds`, `bad entry`.",
		"",
		"### C2. Two again",
		"",
		"Repeated.",
		"",
		"Held by: `pkg.TestC2_Holds`",
		"",
		"### D1. Design",
		"",
		"No tests.",
		"",
		"## C4 is here but not as a clause heading",
		"",
		"### C5. Beyond the contract",
		"",
		"Extra.",
		"",
		"Held by: `pkg.TestC2_Holds`",
	}, "\n"))

	got, err := contractProblems(root, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"docs/contract.md:9: C3: no statement before Held by:",
		"docs/contract.md:11: C3: Held by: wants a comma-separated list of `dir.TestName` or `dir.TestName/subtest` entries, each in backquotes; found \"pkg.TestC1_Holds\" outside them",
		"docs/contract.md:13: C2: out of order: follows C3",
		"docs/contract.md:17: C2: Held by: pkg.TestGone: pkg/*_test.go has no func TestGone(t *testing.T)",
		"docs/contract.md:17: C2: Held by: pkg.TestNotATest: pkg/*_test.go has no func TestNotATest(t *testing.T)",
		"docs/contract.md:17: C2: Held by: nowhere.TestC1_Holds: nowhere/*_test.go has no func TestC1_Holds(t *testing.T)",
		"docs/contract.md:17: C2: Held by: pkg.TestC1_Holds/NoSuchSubtest: no string literal names the subtest NoSuchSubtest in pkg's test files or the repository packages they import",
		"docs/contract.md:17: C2: Held by: pkg.TestC1_Holds is listed twice",
		"docs/contract.md:17: C2: Held by: ../pkg.TestC1_Holds: want `dir.TestName` or `dir.TestName/subtest`, dir relative to the repository root",
		"docs/contract.md:17: C2: Held by: bad entry: want `dir.TestName` or `dir.TestName/subtest`, dir relative to the repository root",
		"docs/contract.md:20: C2: defined twice (first at docs/contract.md:13)",
		"docs/contract.md:26: D1: no Held by: line naming the tests that hold it",
		"docs/contract.md:30: C4: malformed clause heading: want \"### C4. <short title>\"",
		"docs/contract.md:32: C5: outside the contract (C1-C4, D1-D2)",
		"docs/contract.md: C4 is not defined",
		"docs/contract.md: D2 is not defined",
		"pkg/pkg_test.go:13: cites " + d9 + ", which docs/contract.md does not define",
		"pkg/pkg_test.go:13: cites " + d9 + ", which docs/contract.md does not define",
		"pkg/pkg_test.go:14: cites C4, which docs/contract.md does not define",
		"pkg/pkg_test.go:14: cites " + c43 + ", which docs/contract.md does not define",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestD4_TopLevelLayout holds D4: the repository's top level keeps the
// module file, the README and the directories the design names.
func TestD4_TopLevelLayout(t *testing.T) {
	root := repoRoot(t)
	for _, p := range []string{"go.mod", "README.md", "actors/", "events/", "projections/", "runtime/", "store/jetstream/", "cmd/node/", "cluster/", "test/"} {
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(p, "/"))))
		switch {
		case err != nil:
			t.Errorf("D4 (%s): %s: %v", contractDoc, p, err)
		case strings.HasSuffix(p, "/") != fi.IsDir():
			t.Errorf("D4 (%s): %s is a directory: %v, want %v", contractDoc, p, fi.IsDir(), strings.HasSuffix(p, "/"))
		}
	}
}

// TestD6_DirectDependencies holds D6's list: go.mod requires each library
// the design is built on directly, not merely through another module.
func TestD6_DirectDependencies(t *testing.T) {
	root := repoRoot(t)
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	direct := map[string]bool{} // module paths go.mod requires directly
	inBlock := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimSpace(strings.TrimPrefix(line, "require "))
		case !inBlock:
			continue
		}
		if fields := strings.Fields(line); len(fields) >= 2 && !strings.Contains(line, "// indirect") {
			direct[fields[0]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, mod := range []string{"github.com/asynkron/protoactor-go", "github.com/nats-io/nats.go", "github.com/dop251/goja", "github.com/kaptinlin/jsonschema"} {
		if !direct[mod] {
			t.Errorf("D6 (%s): go.mod does not require %s directly", contractDoc, mod)
		}
	}
}

// contractClause is one clause as docs/contract.md defines it.
type contractClause struct {
	id       string // "C13"
	line     int    // of its heading
	heldLine int    // of its Held by: line; 0 when it has none
	held     []string
}

var (
	// contractHeading is a clause heading exactly as the document writes
	// one: "### C13. Title".
	contractHeading = regexp.MustCompile(`^### ([CD][1-9][0-9]*)\. \S`)
	// contractLooseHeading is any heading that starts like a clause; one
	// that is not a contractHeading is a clause the checks would miss.
	contractLooseHeading = regexp.MustCompile(`^#+\s*\**([CD][0-9]+)\b`)
	// contractEntry is a Held by: entry: a directory relative to the
	// repository root, a top-level test, and optionally a subtest path as
	// go test -run names it.
	contractEntry = regexp.MustCompile(`^([A-Za-z0-9_][A-Za-z0-9_.\-/]*?)\.(Test[A-Za-z0-9_]*)(?:/(.+))?$`)
	// contractBackquoted is one backquoted entry of a Held by: list.
	contractBackquoted = regexp.MustCompile("`([^`]*)`")
)

// contractProblems checks the contract under root, with clauses C1..lastC
// and D1..lastD, and describes each problem as "file:line: what".
func contractProblems(root string, lastC, lastD int) ([]string, error) {
	clauses, problems, err := contractParse(root, lastC, lastD)
	if err != nil {
		return nil, err
	}
	defined := map[string]bool{}
	for _, c := range clauses {
		defined[c.id] = true
	}
	for _, id := range contractIDs(lastC, lastD) {
		if !defined[id] {
			problems = append(problems, fmt.Sprintf("%s: %s is not defined", contractDoc, id))
		}
	}
	cites, unread, err := contractCitations(root)
	if err != nil {
		return nil, err
	}
	problems = append(problems, unread...)
	for _, c := range cites {
		if !defined[c.id] || !contractInRange(c.id, lastC, lastD) {
			problems = append(problems, fmt.Sprintf("%s: cites %s, which %s does not define", c.at, c.id, contractDoc))
		}
	}
	return problems, nil
}

// contractIDs lists the clauses in their order: C1..lastC, then D1..lastD.
func contractIDs(lastC, lastD int) []string {
	var ids []string
	for i := 1; i <= lastC; i++ {
		ids = append(ids, "C"+strconv.Itoa(i))
	}
	for i := 1; i <= lastD; i++ {
		ids = append(ids, "D"+strconv.Itoa(i))
	}
	return ids
}

func contractInRange(id string, lastC, lastD int) bool {
	n, err := strconv.Atoi(id[1:])
	if err != nil || n < 1 {
		return false
	}
	if id[0] == 'C' {
		return n <= lastC
	}
	return n <= lastD
}

// contractParse reads the document's clauses and checks each on its own:
// the heading's form and place, the statement, the Held by: list and
// every test it names. Sections end at the next heading of any level.
func contractParse(root string, lastC, lastD int) ([]contractClause, []string, error) {
	raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(contractDoc)))
	if err != nil {
		return nil, nil, err
	}
	lines := strings.Split(string(raw), "\n")
	order := map[string]int{}
	for i, id := range contractIDs(lastC, lastD) {
		order[id] = i
	}
	type lineProblem struct {
		line int
		text string
	}
	var (
		clauses []contractClause
		found   []lineProblem
		first   = map[string]int{} // clause -> line of its first heading
		last    = -1               // order of the last clause in order
		lastID  string
	)
	problem := func(line int, id, format string, args ...any) {
		found = append(found, lineProblem{line, fmt.Sprintf("%s:%d: %s: %s", contractDoc, line, id, fmt.Sprintf(format, args...))})
	}
	fence := ""
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		m := contractHeading.FindStringSubmatch(lines[i])
		if m == nil {
			if l := contractLooseHeading.FindStringSubmatch(lines[i]); l != nil {
				problem(i+1, l[1], "malformed clause heading: want %q", "### "+l[1]+". <short title>")
			}
			continue
		}
		c := contractClause{id: m[1], line: i + 1}
		// The section: up to the next heading, fences skipped.
		end := i + 1
		for f := ""; end < len(lines); end++ {
			t := strings.TrimSpace(lines[end])
			if f != "" {
				if strings.HasPrefix(t, f) {
					f = ""
				}
				continue
			}
			if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				f = t[:3]
				continue
			}
			if strings.HasPrefix(lines[end], "#") {
				break
			}
		}
		statement := false
		for j := i + 1; j < end; j++ {
			t := strings.TrimSpace(lines[j])
			if !strings.HasPrefix(t, "Held by:") {
				if c.heldLine == 0 && t != "" {
					statement = true
				}
				continue
			}
			if c.heldLine != 0 {
				problem(j+1, c.id, "a second Held by: line (the first is at %s:%d)", contractDoc, c.heldLine)
				continue
			}
			c.heldLine = j + 1
			// The list runs on to the end of its paragraph.
			list := strings.TrimPrefix(t, "Held by:")
			for j+1 < end && strings.TrimSpace(lines[j+1]) != "" {
				j++
				list += " " + strings.TrimSpace(lines[j])
			}
			for _, e := range contractBackquoted.FindAllStringSubmatch(list, -1) {
				c.held = append(c.held, e[1])
			}
			if rest := strings.Trim(contractBackquoted.ReplaceAllString(list, ""), " ,."); rest != "" {
				problem(c.heldLine, c.id, "Held by: wants a comma-separated list of `dir.TestName` or `dir.TestName/subtest` entries, each in backquotes; found %q outside them", rest)
			}
		}
		switch {
		case c.heldLine == 0:
			problem(c.line, c.id, "no Held by: line naming the tests that hold it")
		case !statement:
			problem(c.line, c.id, "no statement before Held by:")
		case len(c.held) == 0:
			problem(c.heldLine, c.id, "Held by: names no test")
		}
		switch o, ok := order[c.id]; {
		case !ok:
			problem(c.line, c.id, "outside the contract (C1-C%d, D1-D%d)", lastC, lastD)
		case first[c.id] != 0:
			problem(c.line, c.id, "defined twice (first at %s:%d)", contractDoc, first[c.id])
		case o < last:
			problem(c.line, c.id, "out of order: follows %s", lastID)
			first[c.id] = c.line
		default:
			first[c.id] = c.line
			last, lastID = o, c.id
		}
		if first[c.id] == c.line {
			clauses = append(clauses, c)
		}
		i = end - 1
	}
	pkgs := map[string]*contractPkg{}
	for _, c := range clauses {
		seen := map[string]bool{}
		for _, e := range c.held {
			if seen[e] {
				problem(c.heldLine, c.id, "Held by: %s is listed twice", e)
				continue
			}
			seen[e] = true
			if p := contractCheckEntry(root, pkgs, e); p != "" {
				problem(c.heldLine, c.id, "Held by: %s: %s", e, p)
			}
		}
	}
	// In the document's order, whatever the order of the checks.
	slices.SortStableFunc(found, func(a, b lineProblem) int { return a.line - b.line })
	problems := make([]string, len(found))
	for i, p := range found {
		problems[i] = p.text
	}
	return clauses, problems, nil
}

// contractCheckEntry says what is wrong with one Held by: entry, or returns
// "" when the test (and subtest) it names exists.
func contractCheckEntry(root string, pkgs map[string]*contractPkg, entry string) string {
	m := contractEntry.FindStringSubmatch(entry)
	if m == nil || path.Clean(m[1]) != m[1] || strings.HasPrefix(m[1], "../") {
		return "want `dir.TestName` or `dir.TestName/subtest`, dir relative to the repository root"
	}
	dir, test, sub := m[1], m[2], m[3]
	p, ok := pkgs[dir]
	if !ok {
		p = contractLoadPkg(root, dir)
		pkgs[dir] = p
	}
	if p.err != nil {
		return p.err.Error()
	}
	if !p.tests[test] {
		return fmt.Sprintf("%s/*_test.go has no func %s(t *testing.T)", dir, test)
	}
	if sub == "" {
		return ""
	}
	if p.subErr != nil {
		return p.subErr.Error()
	}
	for _, s := range strings.Split(sub, "/") {
		if !p.subtests[s] {
			return fmt.Sprintf("no string literal names the subtest %s in %s's test files or the repository packages they import", s, dir)
		}
	}
	return ""
}

// contractPkg is what a Held by: entry can name in one directory.
type contractPkg struct {
	tests    map[string]bool // top-level func TestX(t *testing.T) of its test files
	subtests map[string]bool // string literals as go test names subtests
	err      error           // its test files could not be read or parsed
	subErr   error           // a file the subtest names come from could not be
}

// contractLoadPkg reads the test files of root/dir. A subtest's name is
// usually a literal in the test itself, or in a suite the test runs from a
// package of this module (store/storetest, runtime/runtimetest), so the
// literals of those packages' files count too.
func contractLoadPkg(root, dir string) *contractPkg {
	p := &contractPkg{tests: map[string]bool{}, subtests: map[string]bool{}}
	module, err := contractModulePath(root)
	if err != nil {
		p.err = err
		return p
	}
	fset := token.NewFileSet()
	testFiles, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*_test.go"))
	if err != nil {
		p.err = err
		return p
	}
	imported := map[string]bool{dir: true}
	for _, name := range testFiles {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			p.err = contractRelErr(root, err)
			return p
		}
		testingName := ""
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if ip == "testing" {
				testingName = "testing"
				if imp.Name != nil {
					testingName = imp.Name.Name
				}
			}
			if rel, ok := strings.CutPrefix(ip, module+"/"); ok {
				imported[rel] = true
			}
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && contractTakesT(fn, testingName) {
				p.tests[fn.Name.Name] = true
			}
		}
		contractAddLiterals(p.subtests, f)
	}
	for rel := range imported {
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(rel), "*.go"))
		if err != nil {
			p.subErr = err
			return p
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue // the directory's own were read above; others' are not imported
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				p.subErr = contractRelErr(root, err)
				return p
			}
			contractAddLiterals(p.subtests, f)
		}
	}
	return p
}

// contractTakesT reports whether fn's only parameter is a *testing.T, with
// testingName the name the file imports package testing under.
func contractTakesT(fn *ast.FuncDecl, testingName string) bool {
	params := fn.Type.Params.List
	if testingName == "" || len(params) != 1 || len(params[0].Names) > 1 || fn.Type.Results != nil {
		return false
	}
	star, ok := params[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == testingName && sel.Sel.Name == "T"
}

// contractAddLiterals adds every string literal of f as go test would name
// a subtest of that name: spaces become underscores.
func contractAddLiterals(into map[string]bool, f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				into[strings.ReplaceAll(s, " ", "_")] = true
			}
		}
		return true
	})
}

// contractRelErr names files in err relative to root: a parse error
// carries the absolute path, which differs from one checkout to the next.
func contractRelErr(root string, err error) error {
	return errors.New(strings.ReplaceAll(err.Error(), root+string(filepath.Separator), ""))
}

// contractModulePath reads the module path from root/go.mod.
func contractModulePath(root string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", errors.New("go.mod: no module line")
}

// contractCitation is one clause a Go file cites.
type contractCitation struct {
	id string // "C13"
	at string // "file:line"
}

// contractCitations finds every clause cited in the module's Go files:
// in comments, in string literals (t.Run names, suite tables, failure
// messages) and in test names (TestC12_C13_...). Directories go build
// ignores (testdata, names starting with . or _) and generated files are
// skipped: they cite nothing, and a generated descriptor's bytes could
// look like a citation. A file that does not parse is reported, and the
// walk goes on: its citations cannot be checked, the others still are.
func contractCitations(root string) ([]contractCitation, []string, error) {
	var (
		out    []contractCitation
		unread []string
	)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			unread = append(unread, fmt.Sprintf("%s: cannot be read for clause citations: %v", rel, contractRelErr(root, err)))
			return nil
		}
		if ast.IsGenerated(f) {
			return nil
		}
		add := func(pos token.Pos, text string) {
			for _, id := range contractCited(text) {
				out = append(out, contractCitation{id: id, at: fmt.Sprintf("%s:%d", rel, fset.Position(pos).Line)})
			}
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				// A citation in a block comment is reported on the line
				// it is on, not the comment's first.
				for i, line := range strings.Split(c.Text, "\n") {
					for _, id := range contractCited(line) {
						out = append(out, contractCitation{id: id, at: fmt.Sprintf("%s:%d", rel, fset.Position(c.Pos()).Line+i)})
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if s, err := strconv.Unquote(n.Value); err == nil {
						add(n.Pos(), s)
					}
				}
			case *ast.FuncDecl:
				if n.Recv == nil && strings.HasPrefix(n.Name.Name, "Test") {
					add(n.Pos(), n.Name.Name)
				}
			}
			return true
		})
		return nil
	})
	slices.SortStableFunc(out, func(a, b contractCitation) int {
		if c := contractCompareAt(a.at, b.at); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return out, unread, err
}

// contractCompareAt orders "file:line" by file, then by line as a number.
func contractCompareAt(a, b string) int {
	fa, la, _ := strings.Cut(a, ":")
	fb, lb, _ := strings.Cut(b, ":")
	if c := strings.Compare(fa, fb); c != 0 {
		return c
	}
	na, _ := strconv.Atoi(la)
	nb, _ := strconv.Atoi(lb)
	return na - nb
}

// contractCited returns the clauses text cites: a C or a D and a number,
// standing alone ("(C13)", "C11-C18", "D2:") or as a part of a test name
// between underscores ("TestC12_C13_C14", "C11_FreshRunLoadsNil"). A letter
// or digit right before or after is not a citation: "0xC1", "ABC12",
// "C2C" are something else.
func contractCited(text string) []string {
	var ids []string
	for i := 0; i < len(text); i++ {
		if text[i] != 'C' && text[i] != 'D' {
			continue
		}
		start := i
		if i >= 4 && text[i-4:i] == "Test" {
			start = i - 4
		}
		if start > 0 && contractAlnum(text[start-1]) {
			continue
		}
		j := i + 1
		for j < len(text) && text[j] >= '0' && text[j] <= '9' {
			j++
		}
		if j == i+1 || (j < len(text) && contractAlnum(text[j])) {
			continue
		}
		ids = append(ids, text[i:j])
	}
	return ids
}

func contractAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}
