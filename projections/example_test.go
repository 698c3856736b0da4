package projections_test

import (
	"fmt"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
)

// A Follower applies each stream sequence once: a redelivered event (after
// a restart, say) changes nothing.
func ExampleFollower() {
	ix := projections.NewRuns()
	f := projections.NewFollower(ix)
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	created, _ := events.New(events.RunCreated, "s1", "r1", 0, 0, at, events.Run{RunID: "r1", SessionID: "s1", Agent: "researcher", RootRunID: "r1"})
	ended, _ := events.New(events.RunEnded, "s1", "r1", 0, 0, at.Add(time.Second), events.Ended{Status: "cancelled", Reason: "by the user"})
	for _, e := range []projections.Event{
		{Seq: 1, Subject: events.RunCreatedSubject("s1", "r1"), Envelope: created},
		{Seq: 4, Subject: events.RunEndedSubject("s1", "r1"), Envelope: ended},
		{Seq: 1, Subject: events.RunCreatedSubject("s1", "r1"), Envelope: created}, // redelivered
	} {
		applied, _ := f.Offer(e)
		fmt.Println(e.Seq, e.Type, applied)
	}
	run, _ := ix.Get("r1")
	fmt.Println(run.Agent, run.Status, run.Error, f.Seq())
	// Output:
	// 1 cairn.run.created true
	// 4 cairn.run.ended true
	// 1 cairn.run.created false
	// researcher cancelled by the user 4
}
