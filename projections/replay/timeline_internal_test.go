package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// A response commit that cost failed provider requests lists each of them,
// at the time it failed, before the model step; the model step carries its
// tokens.
func TestTimelineShowsModelFailures(t *testing.T) {
	failedAt := time.Unix(100, 0).UTC()
	committed := failedAt.Add(3 * time.Second)
	cp := &runtime.Checkpoint{Revision: 4, Step: 2, ResponseID: "m4",
		Append: []model.Message{{ID: "m4", Role: model.RoleAssistant, Parts: []model.Part{model.Call("c1", "run_js", "{}")}}},
		Usage:  &model.Usage{InputTokens: 30, OutputTokens: 7},
		ModelFailures: []model.Failure{
			{Provider: "openai", Model: "m", Attempt: 1, Status: 503, Class: model.FailureStatus, Error: "overloaded", Retry: true, RetryIn: time.Second, At: failedAt},
			{Provider: "openai", Model: "m", Attempt: 2, Class: model.FailureTimeout, Error: "timed out", Retry: true, RetryIn: 2 * time.Second, At: failedAt.Add(time.Second)},
		}}
	got := commitEntries(Entry{Seq: 9, Time: committed, Revision: 4}, cp)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, e.Kind)
	}
	if len(got) != 3 || got[0].Kind != "model_failure" || got[1].Kind != "model_failure" || got[2].Kind != "model" {
		t.Fatalf("entries %v, want two model failures then the model step", kinds)
	}
	if !got[0].Time.Equal(failedAt) || got[0].Revision != 3 || got[0].Failure.Status != 503 || got[0].Text != "openai m request 1 failed (HTTP 503): overloaded; retrying in 1s" {
		t.Fatalf("first failure entry %+v", got[0])
	}
	if got[1].Text != "openai m request 2 failed (timeout): timed out; retrying in 2s" || got[1].Failure.Attempt != 2 {
		t.Fatalf("second failure entry %+v", got[1])
	}
	if !got[2].Time.Equal(committed) || got[2].Usage == nil || got[2].Usage.InputTokens != 30 {
		t.Fatalf("model entry %+v: want the commit's time and its tokens", got[2])
	}
}

// Each attempt says how it ended, from what the log holds after it.
func TestAttemptsSayHowTheyEnded(t *testing.T) {
	attempt := Entry{Kind: "attempt", Text: "attempt"}
	tests := []struct {
		name string
		tl   []Entry
		want []string
	}{
		{"completed", []Entry{attempt, {Kind: "model"}, {Kind: "completed", Text: "output: 1"}}, []string{"completed"}},
		{"needs input", []Entry{attempt, {Kind: "completed", Text: "needs input: which?"}}, []string{"needs_input"}},
		{"failed", []Entry{attempt, {Kind: "model"}, {Kind: "ended", Text: "failed: model: HTTP 401"}}, []string{"failed"}},
		{"crashed, then resumed and completed", []Entry{attempt, {Kind: "model"}, {Kind: "call", Tool: "run_js"}, attempt, {Kind: "result"}, {Kind: "completed"}},
			[]string{"stopped", "completed"}},
		{"parked, woken by a later attempt", []Entry{attempt, {Kind: "call", Tool: runtime.ToolWait}, attempt, {Kind: "result"}},
			[]string{"parked", "running"}},
		{"parked, woken in the same attempt", []Entry{attempt, {Kind: "call", Tool: runtime.ToolWait}, {Kind: "result"}, {Kind: "model"}}, []string{"running"}},
		{"cancelled while parked", []Entry{attempt, {Kind: "call", Tool: runtime.ToolWait}, {Kind: "ended", Text: "cancelled: by its owner"}}, []string{"cancelled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			endAttempts(tt.tl)
			var got []string
			for _, e := range tt.tl {
				if e.Kind == "attempt" {
					got = append(got, e.Ended)
					if e.Text != "attempt: "+e.Ended {
						t.Errorf("text %q does not say it", e.Text)
					}
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("attempts ended %v, want %v", got, tt.want)
			}
		})
	}
}
