package projections_test

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
)

// A session's purge marker turns its runs into purged entries that keep
// how they ended; an index rebuilt from a log where the marker alone is
// left has the same entries. Finished lists a session only once every run
// in it ended before the cut-off, and no run below it (a child, a
// descendant drawing on its root's budget) is still active.
func TestRunIndexPurgedAndFinished(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	ev, seqOf := sequencer(t)
	create := func(s, r, parent, root string, at time.Time) projections.Event {
		e, err := events.New(events.RunCreated, s, r, 0, 0, at, events.Run{RunID: r, SessionID: s, Agent: "a", Owner: "alice", ParentRunID: parent, RootRunID: root})
		return ev(events.RunCreatedSubject(s, r), e, err)
	}
	end := func(s, r string, at time.Time) projections.Event {
		e, err := events.New(events.RunEnded, s, r, 0, 0, at, events.Ended{Status: "failed", Reason: "x"})
		return ev(events.RunEndedSubject(s, r), e, err)
	}
	marker := func(s string, at time.Time, runs ...events.PurgedRun) projections.Event {
		e, err := events.New(events.SessionPurged, s, "", 0, 0, at, events.Purge{Runs: runs, Before: seqOf(), Retention: "1h0m0s"})
		e.Version = events.PurgeVersion
		return ev(events.SessionPurgedSubject(s), e, err)
	}
	ix := projections.NewRuns()
	apply := func(es ...projections.Event) {
		t.Helper()
		for _, e := range es {
			if err := ix.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	// root session s1 (r1, then its child c1 in session k1), session s2
	// ended later, session s3 still running.
	apply(create("s1", "r1", "", "r1", t0), create("k1", "c1", "r1", "r1", t0), end("s1", "r1", t0.Add(time.Minute)),
		create("s2", "r2", "", "r2", t0), end("s2", "r2", t0.Add(time.Hour)),
		create("s3", "r3", "", "r3", t0))
	cut := func(agent string) (time.Time, bool) { return t0.Add(30 * time.Minute), agent == "a" }
	if got := ix.Finished(cut); len(got) != 0 {
		t.Fatalf("Finished = %q; want none: s1's child runs, s2 ended after the cut, s3 runs", got)
	}
	apply(end("k1", "c1", t0.Add(2*time.Minute)))
	if got, want := ix.Finished(cut), []string{"k1", "s1"}; !slices.Equal(got, want) {
		t.Fatalf("Finished = %q, want %q", got, want)
	}
	if got := ix.Finished(func(string) (time.Time, bool) { return t0.Add(time.Hour), false }); len(got) != 0 {
		t.Fatalf("Finished with every agent kept forever = %q, want none", got)
	}

	purge := marker("s1", t0.Add(2*time.Hour), events.PurgedRun{RunID: "r1", Agent: "a", Owner: "alice", RootRunID: "r1", Status: "failed", Created: t0, Ended: t0.Add(time.Minute)})
	apply(purge)
	got, ok := ix.Get("r1")
	if !ok || got.Status != runtime.StatusPurged || got.EndedAs != runtime.StatusFailed || !got.Purged.Equal(t0.Add(2*time.Hour)) || got.Owner != "alice" {
		t.Fatalf("r1 after its session's purge: %+v", got)
	}
	if got, want := ix.Finished(cut), []string{"k1"}; !slices.Equal(got, want) {
		t.Fatalf("Finished after s1's purge = %q, want %q", got, want)
	}
	if got := ix.PurgedSessions(); !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("PurgedSessions = %q, want [s1]", got)
	}
	if c := ix.Counts(); c[runtime.StatusPurged] != 1 {
		t.Fatalf("counts %v, want one purged", c)
	}

	// A rebuild from a log that holds the marker alone of s1.
	fresh := projections.NewRuns()
	if err := fresh.Apply(purge); err != nil {
		t.Fatal(err)
	}
	re, ok := fresh.Get("r1")
	if !ok || re.Status != runtime.StatusPurged || re.EndedAs != runtime.StatusFailed || re.Owner != "alice" || re.SessionID != "s1" ||
		!re.Created.Equal(t0) || !re.Updated.Equal(t0.Add(time.Minute)) {
		t.Fatalf("r1 rebuilt from the marker: %+v", re)
	}
	if l := fresh.List("alice", false); len(l) != 1 || l[0].RunID != "r1" {
		t.Fatalf("List after a rebuild = %+v, want r1", l)
	}
}

// The recorded log of a purged session (events/testdata/v3-purged, by go
// run ./test/recordlogs) builds its run's purged entry.
func TestRunIndexFromARecordedPurge(t *testing.T) {
	raw, err := os.ReadFile("../events/testdata/v3-purged/needs_input.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ix := projections.NewRuns()
	for i, l := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var line struct {
			Subject string          `json:"subject"`
			Body    json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(l, &line); err != nil {
			t.Fatal(err)
		}
		e, err := events.Decode(line.Body)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if err := ix.Apply(projections.Event{Seq: uint64(i + 1), Subject: line.Subject, Envelope: e}); err != nil {
			t.Fatal(err)
		}
	}
	got, ok := ix.Get("r1")
	if !ok || got.Status != runtime.StatusPurged || got.EndedAs != runtime.StatusNeedsInput || got.Purged.IsZero() || got.SessionID != "s1" {
		t.Fatalf("r1 from the recorded purge: %+v, %v", got, ok)
	}
}
