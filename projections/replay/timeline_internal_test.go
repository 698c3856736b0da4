package replay

import (
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
	if !got[0].Time.Equal(failedAt) || got[0].Failure.Status != 503 || got[0].Text != "openai m request 1 failed (HTTP 503): overloaded; retrying in 1s" {
		t.Fatalf("first failure entry %+v", got[0])
	}
	if got[1].Text != "openai m request 2 failed (timeout): timed out; retrying in 2s" || got[1].Failure.Attempt != 2 {
		t.Fatalf("second failure entry %+v", got[1])
	}
	if !got[2].Time.Equal(committed) || got[2].Usage == nil || got[2].Usage.InputTokens != 30 {
		t.Fatalf("model entry %+v: want the commit's time and its tokens", got[2])
	}
}
