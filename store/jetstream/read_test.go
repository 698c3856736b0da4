package jetstream

import (
	"strings"
	"testing"
)

func TestSubjectMatches(t *testing.T) {
	for _, tc := range []struct {
		filter, subject string
		want            bool
	}{
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
		if got := subjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
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
		if validFilter(filter) != nil || validFilter(subject) != nil || strings.ContainsAny(subject, "*>") {
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
		if got := subjectMatches(filter, subject); got != want {
			t.Fatalf("subjectMatches(%q, %q) = %v, want %v", filter, subject, got, want)
		}
	})
}
