package model_test

import (
	"context"
	"slices"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// A trace added under another reports to both, the inner one first; no
// trace, or a nil hook, is no report and no panic.
func TestTracesCompose(t *testing.T) {
	model.ReportFailure(context.Background(), model.Failure{Attempt: 1})
	var got []string
	ctx := model.WithTrace(context.Background(), &model.Trace{AttemptFailed: func(model.Failure) { got = append(got, "outer") }})
	ctx = model.WithTrace(ctx, &model.Trace{})
	ctx = model.WithTrace(ctx, nil)
	ctx = model.WithTrace(ctx, &model.Trace{AttemptFailed: func(model.Failure) { got = append(got, "inner") }})
	model.ReportFailure(ctx, model.Failure{Attempt: 1})
	if want := []string{"inner", "outer"}; !slices.Equal(got, want) {
		t.Fatalf("reports %v, want %v", got, want)
	}
}
