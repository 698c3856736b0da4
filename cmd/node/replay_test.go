package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// runResearcher runs the README's example in-process and returns its run ID.
func runResearcher(t *testing.T, dir string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runCmd([]string{"--data", dir, example, "Is the Great Wall visible from orbit?"}, &out, &errb); code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	m := regexp.MustCompile(`(?m)^run (\S+) of researcher started`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no run ID in:\n%s", out.String())
	}
	return m[1]
}

func replayOut(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := replayCmd(args, &out, &errb); code != wantCode {
		t.Fatalf("replay %v: exit %d, want %d\n%s\n%s", args, code, wantCode, out.String(), errb.String())
	}
	return out.String() + errb.String()
}

// `node replay` on a finished run: the timeline at any revision, the state
// as JSON, a re-drive that reproduces every logged commit, a diff, and a
// fork that resumes to the same answer; bad flags name the flag.
func TestReplayVerb(t *testing.T) {
	dir := t.TempDir()
	run := runResearcher(t, dir)
	agents := "../../examples/agents"

	tl := replayOut(t, 0, "--data", dir, run)
	for _, want := range []string{"task", "model", "spawn_fact_checker", "child run", "wait_calls", "completed", "budget:", "attempt 1"} {
		if !strings.Contains(tl, want) {
			t.Fatalf("timeline lacks %q:\n%s", want, tl)
		}
	}
	early := replayOut(t, 0, "--data", dir, "--at", "2", run)
	if strings.Contains(early, "completed ") || !strings.Contains(early, "at revision 2 of") {
		t.Fatalf("timeline at revision 2:\n%s", early)
	}
	js := replayOut(t, 0, "--data", dir, "--json", "--at", "last-1", run)
	if !strings.Contains(js, `"checkpoint"`) || !strings.Contains(js, `"transcript"`) {
		t.Fatalf("--json:\n%.600s", js)
	}
	rd := replayOut(t, 0, "--data", dir, "--agents", agents, "--redrive", run)
	if !strings.Contains(rd, "identical") {
		t.Fatalf("re-drive:\n%s", rd)
	}
	diff := replayOut(t, 0, "--data", dir, "--at", "1", "--diff", "last", run)
	if !strings.Contains(diff, "reply") {
		t.Fatalf("diff of revision 1 and the last:\n%s", diff)
	}
	// The earlier revision is the "-" side, whichever flag names it (the
	// --at revision was the "-" side before: --diff 1 showed the run going
	// backwards).
	if back := replayOut(t, 0, "--data", dir, "--diff", "1", run); back != diff {
		t.Errorf("--diff 1 (at the last) and --at 1 --diff last differ:\n%s\n---\n%s", back, diff)
	}
	if !regexp.MustCompile(`^--- run \S+ revision 1\n\+\+\+ run \S+ revision [1-9][0-9]*\n`).MatchString(diff) ||
		!regexp.MustCompile(`\nrevision\n  - 1\n  \+ [1-9][0-9]*\n`).MatchString(diff) {
		t.Errorf("diff of revision 1 and the last, sides:\n%s", diff)
	}
	// A fork from revision 1 runs the task again on a node: same answer.
	fork := replayOut(t, 0, "--data", dir, "--agents", agents, "--fork", "--at", "1", run)
	if !regexp.MustCompile(`forked run fork-\S+ completed: .*"verdict":"refuted"`).MatchString(fork) {
		t.Fatalf("fork:\n%s", fork)
	}
	if again := replayOut(t, 0, "--data", dir, run); again != tl {
		t.Fatal("the original run's timeline changed after the fork")
	}
	for _, bad := range [][]string{{"--at", "0"}, {"--at", "last-99999"}, {"--at", "x"}, {"--fork"}, {"--diff", "-3"}} {
		out := replayOut(t, 2, append(append([]string{"--data", dir}, bad...), run)...)
		if !strings.Contains(out, "--at") && !strings.Contains(out, "--diff") {
			t.Fatalf("replay %v: the error does not name the flag: %s", bad, out)
		}
	}
	replayOut(t, 1, "--data", dir, "no-such-run")
}

// parseRevision accepts N, last and last-K within 1..last and names the
// flag otherwise; it never panics.
func FuzzParseRevision(f *testing.F) {
	for _, s := range []string{"", "1", "last", "last-1", "last-", "-1", "0", "99999999999999999999", "last--1", " 2", "last-9223372036854775807"} {
		f.Add(s, int64(10))
	}
	f.Fuzz(func(t *testing.T, s string, last int64) {
		rev, err := parseRevision("at", s, last, last)
		if err != nil {
			var fe *flagError
			if !errors.As(err, &fe) || fe.Flag != "at" {
				t.Fatalf("error %v does not name the flag", err)
			}
			return
		}
		if s != "" && (rev < 1 || rev > last) {
			t.Fatalf("parseRevision(%q, %d) = %d, outside 1..last", s, last, rev)
		}
	})
}
