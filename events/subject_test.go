package events_test

import (
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/events"
)

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
		{"cairn.>", "cairn.sess.s.run.r.c.step", true},
		{"cairn.>", "cairn", false},
		{"cairn.sess.*.run.*.c.*", "cairn.sess.s.run.r.c.step", true},
		{"cairn.sess.*.run.*.c.*", "cairn.sess.s.run.r.lease", false},
		{"cairn.sess.*.run.*.c.*", "cairn.sess.s.run.r.c", false},
		{"cairn.sess.*.run.*.c.*", "cairn.sess.s.run.r.c.step.x", false},
		{"cairn.sess.s1.compact", "cairn.sess.s1.compact", true},
		{"cairn.sess.s1.compact", "cairn.sess.s2.compact", false},
		{"a.b.c", "a.b.c", true},
		{"a.b.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"a.*.c", "a.x.c", true},
		{"a.*.c", "a.x.d", false},
		{"a.*", "a.x.y", false},
		{"a.>", "a.x", true},
		{"a.>", "a.x.y.z", true},
		{"a.>", "a", false},
		{">", "a", true},
		{"*", "a", true},
		{"*", "a.b", false},
		{"cairn.sess.*.run.*.lease", "cairn.sess.s1.run.r1.lease", true},
		{"cairn.sess.*.run.*.lease", "cairn.sess.s1.run.r1.c.done", false},
		{"ab.c", "a.c", false},
		{"a.bc", "a.b", false},
	} {
		if got := events.SubjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("events.SubjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}

// subjectMatches agrees with a token-by-token reference on any input.
func FuzzSubjectMatches(f *testing.F) {
	f.Add("a.*.c", "a.b.c")
	f.Add("a.>", "a")
	f.Add(">", "")
	f.Add("a..b", "a..b")
	f.Fuzz(func(t *testing.T, filter, subject string) {
		if !validFilter(filter) || !validFilter(subject) || strings.ContainsAny(subject, "*>") {
			return
		}
		ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
		want := len(ft) == len(st)
		for i, tok := range ft {
			if tok == ">" {
				want = len(st) > i
				break
			}
			if i >= len(st) || (tok != "*" && tok != st[i]) {
				want = false
				break
			}
		}
		if got := events.SubjectMatches(filter, subject); got != want {
			t.Fatalf("events.SubjectMatches(%q, %q) = %v, want %v", filter, subject, got, want)
		}
	})
}

// validFilter: tokens not empty, wildcards whole tokens, '>' last.
func validFilter(f string) bool {
	if f == "" || strings.ContainsAny(f, " \t\r\n") {
		return false
	}
	toks := strings.Split(f, ".")
	for i, t := range toks {
		if t == "" || (t == ">" && i != len(toks)-1) || (t != "*" && t != ">" && strings.ContainsAny(t, "*>")) {
			return false
		}
	}
	return true
}
