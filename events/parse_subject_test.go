package events

import (
	"errors"
	"testing"
)

func TestParseSubject(t *testing.T) {
	for _, want := range []Subject{
		{SessionID: "s1", RunID: "r1", Kind: KindStep},
		{SessionID: "s1", RunID: "r1", Kind: KindDone},
		{SessionID: "s-2", RunID: "r_2", Kind: KindCreated},
		{SessionID: "s1", RunID: "r1", Kind: KindEnded},
		{SessionID: "s1", RunID: "r1", Kind: KindLease},
		{SessionID: "s1", Kind: KindCompaction},
		{SessionID: "s1", Kind: KindPurged},
	} {
		got, err := ParseSubject(want.String())
		if err != nil || got != want {
			t.Errorf("ParseSubject(%q) = %+v, %v; want %+v", want.String(), got, err, want)
		}
	}
	if !KindDone.Final() || !KindEnded.Final() || KindStep.Final() || KindCreated.Final() {
		t.Error("Final: only the completed commit and the end record end a run")
	}
	for _, bad := range []string{
		"", "cairn", "cairn.sess", "cairn.sess.s1", "other.sess.s1.run.r1.created", "cairn.x.s1.run.r1.created",
		"cairn.sess..run.r1.created", "cairn.sess.s1.run.r1", "cairn.sess.s1.run.r1.c", "cairn.sess.s1.run.r1.c.other",
		"cairn.sess.s1.run.*.created", "cairn.sess.s1.run.r1.>", "cairn.sess.s1.compact.x", "cairn.sess.s1.run..lease", "cairn.sess.s1.purged.x",
	} {
		if got, err := ParseSubject(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseSubject(%q) = %+v, %v; want ErrMalformed", bad, got, err)
		}
	}
}

// Every subject ParseSubject accepts is the subject its result builds, and
// matches the filters a reader would use for it.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{"cairn.sess.s.run.r.c.done", "cairn.sess.s.compact", "cairn.sess.s.run.r.lease", "cairn.sess.a.b.c.d.e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subject string) {
		s, err := ParseSubject(subject)
		if err != nil {
			return
		}
		if s.String() != subject {
			t.Fatalf("ParseSubject(%q) = %+v, which builds %q", subject, s, s.String())
		}
		if !SubjectMatches(AllSessions, subject) || !SubjectMatches(SessionAll(s.SessionID), subject) {
			t.Fatalf("%q does not match its session's filters", subject)
		}
		if s.RunID != "" && (!SubjectMatches(RunAll(s.SessionID, s.RunID), subject) || !SubjectMatches(RunAnySession(s.RunID), subject)) {
			t.Fatalf("%q does not match its run's filters", subject)
		}
	})
}
