package docscheck

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLinksStayInside walks README.md, CONTRIBUTING.md and docs/*.md and
// fails on every relative link or image whose target (its #anchor
// stripped) is missing or lies outside the repository, on any link with a
// scheme other than http, https or mailto, and on any mention of a
// sibling checkout or a path of the machine a document was written on.
func TestLinksStayInside(t *testing.T) {
	root := repoRoot(t)
	files, err := linkDocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		problems, err := linkProblems(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// TestLinkCheckerFindsBrokenLinks runs the checker on a repository made for
// it, so that a checker that finds nothing cannot pass for a tree whose
// links are all fine.
func TestLinkCheckerFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := writer(t, root)
	write("go.mod", "module example.com/m\n")
	write("pkg/x.go", "package pkg\n")
	write("docs/a.md", strings.Join([]string{
		"Fine: [b](b.md), [b's part](b.md#part), [up](../README.md), [dir](../pkg/),",
		"[root-relative](/pkg/x.go), [titled](b.md \"B\"), [angled](<b.md>), ![img](b.md),",
		"[web](https://example.com/x), [mail](mailto:a@example.com), [here](#top).",
		"Broken: [gone](missing.md#part) and ![gone image](img/none.png).",
		"Outside: [escape](../../elsewhere.md) and [local file](file:///etc/passwd).",
		"A sibling: see ../shared/notes for more.",
		"",
		"```",
		"not a link: [x](nowhere.md)",
		"```",
		"",
		"Inline code is not a link either: `[x](nowhere.md)`.",
		"",
		"[ref]: also-missing.md",
	}, "\n"))
	write("docs/b.md", "# Part\n")
	write("README.md", "[docs](docs/a.md) and /work/shared/x\n")

	files, err := linkDocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var rels []string
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		rels = append(rels, filepath.ToSlash(rel))
	}
	if want := []string{"README.md", "docs/a.md", "docs/b.md"}; !slices.Equal(rels, want) {
		t.Fatalf("files = %v, want %v", rels, want)
	}
	var got []string
	for _, f := range files {
		problems, err := linkProblems(root, f)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, problems...)
	}
	want := []string{
		"README.md:1: mentions /work/shared",
		"docs/a.md:4: link missing.md#part: docs/missing.md does not exist",
		"docs/a.md:4: link img/none.png: docs/img/none.png does not exist",
		"docs/a.md:5: link ../../elsewhere.md: resolves outside the repository",
		"docs/a.md:5: link file:///etc/passwd: want a relative path, or an http, https or mailto URL",
		"docs/a.md:6: mentions ../shared",
		"docs/a.md:14: link also-missing.md: docs/also-missing.md does not exist",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// linkDocFiles lists the documents checked: README.md and CONTRIBUTING.md
// at the root (each when it exists) and every docs/*.md, in that order.
func linkDocFiles(root string) ([]string, error) {
	var out []string
	for _, name := range []string{"README.md", "CONTRIBUTING.md"} {
		p := filepath.Join(root, name)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	slices.Sort(docs)
	return append(out, docs...), nil
}

// linkForbidden are paths no document may contain: a checkout beside
// this one, and the place such checkouts live on the machine the
// documents were written on. Neither exists for a reader of the
// repository.
var linkForbidden = []string{"../shared", "/work/shared"}

var (
	// linkInline finds the target of [text](target) and ![alt](target).
	linkInline = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]*)`)
	// linkRefDefinition finds the target of a reference definition: [id]: target.
	linkRefDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// linkCodeSpan is an inline code span; links inside one are text.
	linkCodeSpan = regexp.MustCompile("`+[^`]*`+")
	// linkScheme is a URL scheme at the start of a target.
	linkScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// linkProblems reads one document and describes, one line each as
// file:line: what, every link that does not resolve to an existing file
// or directory inside root, and every forbidden mention.
func linkProblems(root, file string) ([]string, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, file)
	if err != nil {
		return nil, err
	}
	name := filepath.ToSlash(rel)
	dir, err := filepath.EvalSymlinks(filepath.Dir(file))
	if err != nil {
		return nil, err
	}
	var problems []string
	fence := ""
	for i, line := range strings.Split(string(raw), "\n") {
		at := fmt.Sprintf("%s:%d", name, i+1)
		for _, m := range linkForbidden {
			if strings.Contains(line, m) {
				problems = append(problems, fmt.Sprintf("%s: mentions %s", at, m))
			}
		}
		trimmed := strings.TrimSpace(line)
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
		text := linkCodeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range linkInline.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		if m := linkRefDefinition.FindStringSubmatch(text); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if p := linkProblem(realRoot, dir, target); p != "" {
				problems = append(problems, fmt.Sprintf("%s: link %s: %s", at, target, p))
			}
		}
	}
	return problems, nil
}

// linkProblem says what is wrong with one link target of a document in dir,
// or returns "" when nothing is.
func linkProblem(realRoot, dir, target string) string {
	target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
	lower := strings.ToLower(target)
	switch {
	case target == "", strings.HasPrefix(target, "#"):
		return "" // an anchor in the same document
	case strings.HasPrefix(lower, "http://"), strings.HasPrefix(lower, "https://"), strings.HasPrefix(lower, "mailto:"):
		return ""
	case linkScheme.MatchString(target), strings.HasPrefix(target, "//"):
		return "want a relative path, or an http, https or mailto URL"
	}
	path, _, _ := strings.Cut(target, "#")
	path, _, _ = strings.Cut(path, "?")
	if unescaped, err := url.PathUnescape(path); err == nil {
		path = unescaped
	}
	if path == "" {
		return ""
	}
	base := dir
	if strings.HasPrefix(path, "/") { // as a repository's web view reads it: from the root
		base, path = realRoot, strings.TrimLeft(path, "/")
	}
	abs := filepath.Join(base, filepath.FromSlash(path))
	if real, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(real, filepath.Base(abs))
	}
	if !linkInside(realRoot, abs) {
		return "resolves outside the repository"
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		rel, _ := filepath.Rel(realRoot, abs)
		return filepath.ToSlash(rel) + " does not exist"
	}
	if !linkInside(realRoot, real) {
		return "resolves outside the repository (through a symbolic link)"
	}
	return ""
}

// linkInside reports whether path is root or lies below it.
func linkInside(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
