package model_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

type recorder struct {
	got      []model.Usage
	purposes []model.Purpose
	err      error
}

func (r *recorder) RecordUsage(ctx context.Context, p model.Purpose, u model.Usage) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.got = append(r.got, u)
	r.purposes = append(r.purposes, p)
	return r.err
}

// responseRecorder is a recorder shown whole responses.
type responseRecorder struct {
	recorder
	responses []*model.Response
}

func (r *responseRecorder) RecordResponse(_ context.Context, _ model.Purpose, resp *model.Response) error {
	r.responses = append(r.responses, resp)
	return r.err
}

type fixed struct {
	resp *model.Response
	err  error
}

func (f fixed) Generate(context.Context, model.Request) (*model.Response, error) {
	return f.resp, f.err
}

// C34: the wrapper records every reported usage, of failed, interrupted
// and compaction requests too.
func TestC34_UsageWrapperRecordsEveryReportedToken(t *testing.T) {
	u := model.Usage{InputTokens: 100, OutputTokens: 7, CachedInputTokens: 40, ReasoningTokens: 3}
	interrupted := errors.New("stream reset")
	tests := []struct {
		name    string
		inner   fixed
		purpose model.Purpose
		want    int
		wantErr error
	}{
		{"success", fixed{resp: &model.Response{Usage: u}}, model.PurposeStep, 1, nil},
		{"compaction", fixed{resp: &model.Response{Usage: u}}, model.PurposeCompaction, 1, nil},
		{"interrupted with usage", fixed{resp: &model.Response{Usage: u}, err: interrupted}, model.PurposeStep, 1, interrupted},
		{"failed without usage", fixed{err: interrupted}, model.PurposeStep, 0, interrupted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			ctx, cancel := context.WithCancel(context.Background())
			if tc.wantErr != nil {
				cancel() // the caller gave up: the tokens were still spent
			}
			defer cancel()
			_, err := model.WithUsage(tc.inner, rec).Generate(ctx, model.Request{Purpose: tc.purpose})
			if !errors.Is(err, tc.wantErr) && !(tc.wantErr == nil && err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if len(rec.got) != tc.want {
				t.Fatalf("recorded %d usages, want %d", len(rec.got), tc.want)
			}
			// Every token as reported, under the request's purpose.
			for i := range rec.got {
				if rec.got[i] != u || rec.purposes[i] != tc.purpose {
					t.Fatalf("recorded %+v for %q, want %+v for %q", rec.got[i], rec.purposes[i], u, tc.purpose)
				}
			}
		})
	}
	// A recorder that takes whole responses is shown the response of a
	// request that succeeded (its usage included, once), and only the
	// usage of one that failed: it never records the same tokens twice.
	t.Run("a response recorder", func(t *testing.T) {
		for _, tc := range []struct {
			name              string
			inner             fixed
			usages, responses int
		}{
			{"success", fixed{resp: &model.Response{Usage: u, Message: model.Message{Role: model.RoleAssistant}}}, 0, 1},
			{"interrupted with usage", fixed{resp: &model.Response{Usage: u}, err: interrupted}, 1, 0},
			{"no usage", fixed{resp: &model.Response{}}, 0, 0},
		} {
			rec := &responseRecorder{}
			_, _ = model.WithUsage(tc.inner, rec).Generate(context.Background(), model.Request{Purpose: model.PurposeStep})
			if len(rec.got) != tc.usages || len(rec.responses) != tc.responses {
				t.Fatalf("%s: %d usages and %d responses recorded, want %d and %d", tc.name, len(rec.got), len(rec.responses), tc.usages, tc.responses)
			}
			for _, r := range rec.responses {
				if r.Usage != u {
					t.Fatalf("%s: the response recorded carries %+v, want %+v", tc.name, r.Usage, u)
				}
			}
		}
	})
	t.Run("recording failure withholds the response", func(t *testing.T) {
		full := errors.New("ledger unavailable")
		resp, err := model.WithUsage(fixed{resp: &model.Response{Usage: u}}, &recorder{err: full}).Generate(context.Background(), model.Request{})
		if resp != nil || !errors.Is(err, full) {
			t.Fatalf("= %v, %v", resp, err)
		}
	})
}

func TestScriptedAnswersByStepAndFailsLoudly(t *testing.T) {
	s := &model.Scripted{Steps: []model.Response{model.Reply(model.Call("a", "run_js", "{}"))}}
	r, err := s.Generate(context.Background(), model.Request{})
	if err != nil || r.Message.ToolCalls()[0].ID != "a" {
		t.Fatalf("= %+v, %v", r, err)
	}
	// The same request again (a retry after a crash) gets the same answer.
	r2, _ := s.Generate(context.Background(), model.Request{})
	if r2.Message.ToolCalls()[0].ID != "a" {
		t.Fatal("scripted model is not a function of the request")
	}
	// Mutating a returned response does not change the script.
	r.Message.Parts[0].ToolCall.ID = "mutated"
	if r3, _ := s.Generate(context.Background(), model.Request{}); r3.Message.ToolCalls()[0].ID != "a" {
		t.Fatal("script mutated through a response")
	}
	_, err = s.Generate(context.Background(), model.Request{Messages: []model.Message{r2.Message}})
	if !errors.Is(err, model.ErrUnexpectedRequest) {
		t.Fatalf("past the script: %v", err)
	}
	if _, err := s.Generate(context.Background(), model.Request{Purpose: model.PurposeCompaction}); !errors.Is(err, model.ErrUnexpectedRequest) {
		t.Fatalf("compaction without Summarize: %v", err)
	}
	if len(s.Requests()) != 5 {
		t.Fatalf("recorded %d requests", len(s.Requests()))
	}
}

func TestMessageValidate(t *testing.T) {
	tests := []struct {
		name string
		m    model.Message
		ok   bool
	}{
		{"text", model.TextMessage("m1", model.RoleUser, "hi"), true},
		{"no id", model.TextMessage("", model.RoleUser, "hi"), false},
		{"system role", model.TextMessage("m1", "system", "hi"), false},
		{"call without call", model.Message{ID: "m", Role: model.RoleAssistant, Parts: []model.Part{{Type: model.PartToolCall}}}, false},
		{"result without call id", model.Message{ID: "m", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{}}}}, false},
		{"attachment without ref", model.Message{ID: "m", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartAttachment, Attachment: &model.Attachment{}}}}, false},
		{"text with a call", model.Message{ID: "m", Role: model.RoleUser, Parts: []model.Part{{Type: model.PartText, ToolCall: &model.ToolCall{ID: "x"}}}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, model.ErrMalformedMessage)) {
				t.Fatalf("Validate = %v, ok want %v", err, tc.ok)
			}
		})
	}
}
