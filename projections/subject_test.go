package projections

import "testing"

func TestMatchSubject(t *testing.T) {
	for _, c := range []struct {
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
		{"cairn.sess.*.run.*.end", "cairn.sess.s.run.r.end", true},
	} {
		if got := matchSubject(c.filter, c.subject); got != c.want {
			t.Errorf("matchSubject(%q, %q) = %v, want %v", c.filter, c.subject, got, c.want)
		}
	}
}
