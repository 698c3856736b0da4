package projections_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// Tokens come from the response commits (each carries its provider's
// usage) and roll up from children to their root; a commit without usage
// adds nothing, and an event applied twice at the same position is not
// counted twice (the follower's position guards it).
func TestUsageTokensFromResponseCommits(t *testing.T) {
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var log []projections.Event
	add := func(subject string, e events.Envelope, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, projections.Event{Seq: uint64(len(log) + 1), Subject: subject, Envelope: e})
	}
	created := func(run, root string) {
		p := events.Run{RunID: run, SessionID: "s-" + run, Agent: "a", RootRunID: root}
		if run != root {
			p.ParentRunID, p.ParentSessionID = root, "s-"+root
		}
		e, err := events.New(events.RunCreated, "s-"+run, run, 0, 0, at, p)
		add(events.RunCreatedSubject("s-"+run, run), e, err)
	}
	commit := func(run string, rev int64, u *model.Usage) {
		cp := runtime.Checkpoint{Version: 1, Revision: rev, RunKey: run, Step: int(rev), Phase: runtime.PhaseModel, Usage: u,
			Append: []model.Message{model.TextMessage(run+"-m", model.RoleAssistant, "x")}}
		b, err := json.Marshal(cp)
		add(events.CheckpointSubject("s-"+run, run, false), events.NewRaw(events.CheckpointCommitted, "s-"+run, run, rev, 1, at, events.CheckpointPayload(b)), err)
	}
	created("root", "root")
	created("kid", "root")
	commit("root", 1, &model.Usage{InputTokens: 100, OutputTokens: 10})
	commit("root", 2, nil)
	commit("kid", 1, &model.Usage{InputTokens: 40, OutputTokens: 4, ReasoningTokens: 2})
	commit("root", 3, &model.Usage{InputTokens: 130, OutputTokens: 12, CachedInputTokens: 90})

	u := projections.NewUsage()
	f := projections.NewFollower(u)
	for _, e := range log {
		if _, err := f.Offer(e); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := f.Offer(log[2]); err != nil || applied { // a redelivery
		t.Fatalf("a redelivered event: applied %v, %v", applied, err)
	}
	r, _ := u.Run("root")
	if want := (model.Usage{InputTokens: 230, OutputTokens: 22, CachedInputTokens: 90}); r.Tokens != want {
		t.Errorf("root's own tokens %+v, want %+v", r.Tokens, want)
	}
	if want := (model.Usage{InputTokens: 270, OutputTokens: 26, CachedInputTokens: 90, ReasoningTokens: 2}); u.Root("root").Tokens != want {
		t.Errorf("rolled up %+v, want %+v", u.Root("root").Tokens, want)
	}
}
