package main

import (
	"context"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// A node serves a script for as long as it runs: it must not keep a copy
// of every request it answers (the scripted model's default, for tests),
// or its memory grows with every step of every run.
func TestScriptKeepsNoRequests(t *testing.T) {
	s, err := loadScript("../../examples/agents/fact-checker.script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	req := model.Request{Purpose: model.PurposeStep, Messages: []model.Message{{Role: model.RoleUser, Parts: []model.Part{{Type: model.PartText, Text: "Check it."}}}}}
	for range 100 {
		if _, err := s.Generate(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.Requests()); got != 0 {
		t.Fatalf("the script kept %d requests, want none", got)
	}
}
