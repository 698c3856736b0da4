package replay_test

import (
	"encoding/json"
	"testing"

	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// OutcomeOf rebuilds what a logged run_js result says in full, and refuses
// a result whose callback attribution it cannot rebuild.
func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		outcome   jstool.Outcome
		callbacks []jstool.Callback
		want      bool
	}{
		{name: "value", outcome: jstool.Outcome{Value: json.RawMessage(`{"a":[1,2]}`)}, want: true},
		{name: "value and console", outcome: jstool.Outcome{Value: json.RawMessage(`3`), Logs: []jstool.LogLine{{Level: "log", Text: "hi"}}, LogsDropped: 2}, want: true},
		{name: "no value", outcome: jstool.Outcome{}, want: true},
		{name: "exception", outcome: jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: "boom"}}, want: true},
		{name: "timeout with console", outcome: jstool.Outcome{Failure: &jstool.Failure{Kind: "timeout", Message: "5s"}, Logs: []jstool.LogLine{{Level: "warn", Text: "slow"}, {Level: "log", Text: "a] b"}}}, want: true},
		{name: "failure after callbacks", outcome: jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: "late"}},
			callbacks: []jstool.Callback{{Seq: 1, Capability: "kv.put", ArgsDigest: "abc", Outcome: "ok"}}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := jstool.Format(tc.outcome, tc.callbacks)
			r := model.ToolResult{CallID: "c1", Name: "run_js", Content: f.Content, IsError: f.IsError}
			o, ok := replay.OutcomeOf(r)
			if ok != tc.want {
				t.Fatalf("OutcomeOf(%q) ok = %v, want %v", f.Content, ok, tc.want)
			}
			if ok {
				if g := jstool.Format(o, nil); g != f {
					t.Fatalf("rebuilt outcome formats as %+v, logged %+v", g, f)
				}
			}
		})
	}
}
