// Package scripttest runs scripted interaction tests, a small equivalent of
// cockroachdb/datadriven as etcd-io/raft uses it: a file of cases, each a
// few input lines, a "----" line and the output expected, reviewed as text.
// Run with -rewrite to write the outputs the code gives back into the file.
//
//	# a comment
//	woken started
//	----
//	start-attempt started
//	state: running
//
// A case ends at a blank line; its output has no blank line. Lines that
// start with # between cases are comments and are kept by -rewrite.
package scripttest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "scripttest: write the actual outputs into the script files")

// Case is one case of a script.
type Case struct {
	// Pos is file:line of the case's first input line.
	Pos string
	// Input is the case's input lines, comments excluded.
	Input []string
	// Expected is the output the file holds (lines joined by \n, with a
	// final newline when nonempty).
	Expected string
}

type block struct {
	comments []string // comment and blank lines before the case
	c        *Case
}

// Parse reads a script.
func Parse(path string) ([]*Case, error) {
	blocks, _, err := parse(path)
	if err != nil {
		return nil, err
	}
	var out []*Case
	for _, b := range blocks {
		if b.c != nil {
			out = append(out, b.c)
		}
	}
	return out, nil
}

func parse(path string) (blocks []block, trailing []string, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("scripttest: %w", err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			i++
			continue
		}
		c := &Case{Pos: fmt.Sprintf("%s:%d", filepath.Base(path), i+1)}
		for i < len(lines) && lines[i] != "----" {
			if strings.TrimSpace(lines[i]) == "" {
				return nil, nil, fmt.Errorf("scripttest: %s: a blank line before ----", c.Pos)
			}
			if !strings.HasPrefix(lines[i], "#") {
				c.Input = append(c.Input, lines[i])
			}
			i++
		}
		if i == len(lines) {
			return nil, nil, fmt.Errorf("scripttest: %s: no ---- after the input", c.Pos)
		}
		i++ // ----
		var out []string
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			out = append(out, lines[i])
			i++
		}
		if len(out) > 0 {
			c.Expected = strings.Join(out, "\n") + "\n"
		}
		blocks = append(blocks, block{comments: pre, c: c})
		pre = nil
	}
	return blocks, pre, nil
}

// Handler runs one case and returns its output.
type Handler func(t *testing.T, c *Case) string

// Run runs every file matching pattern, each through a new Handler from
// newFile (state never leaks from one file into another), and compares each
// case's output with the expected one (or, with -rewrite, writes it into the
// file).
func Run(t *testing.T, pattern string, newFile func() Handler) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("scripttest: no file matches %s", pattern)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), func(t *testing.T) {
			RunFile(t, path, newFile())
		})
	}
}

// RunFile runs one script.
func RunFile(t *testing.T, path string, f Handler) {
	t.Helper()
	blocks, trailing, err := parse(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, bl := range blocks {
		for _, l := range bl.comments {
			b.WriteString(l + "\n")
		}
		c := bl.c
		got := f(t, c)
		if got != "" && !strings.HasSuffix(got, "\n") {
			got += "\n"
		}
		for _, l := range strings.Split(strings.TrimRight(got, "\n"), "\n") {
			if strings.TrimSpace(l) == "" && got != "" {
				t.Fatalf("%s: the output has a blank line, which a script cannot hold:\n%s", c.Pos, got)
			}
		}
		if !*rewrite && got != c.Expected {
			t.Errorf("%s: %s\ngot:\n%swant:\n%s", c.Pos, strings.Join(c.Input, " | "), got, c.Expected)
		}
		for _, l := range c.Input {
			b.WriteString(l + "\n")
		}
		b.WriteString("----\n" + got)
	}
	for _, l := range trailing {
		b.WriteString(l + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(b.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
