package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/anthropic"
	"github.com/cairn-agents/cairn/runtime/model/openai"
)

// Default live models when a provider key is set and no --model is given.
const (
	defaultOpenAIModel    = "gpt-4.1-mini"
	defaultAnthropicModel = "claude-sonnet-4-5"
)

// modelSpec decides an agent's model: the --model flag wins; then a
// provider key in the environment; then the agent file's own model (the
// offline scripted one in the examples).
func modelSpec(flag, fromFile string) string {
	switch {
	case flag != "":
		return flag
	case os.Getenv("OPENAI_API_KEY") != "":
		return "openai:" + defaultOpenAIModel
	case os.Getenv("ANTHROPIC_API_KEY") != "":
		return "anthropic:" + defaultAnthropicModel
	}
	return fromFile
}

// newModel builds a model from "scripted:<file>", "openai:<model>" or
// "anthropic:<model>", a provider's with the agent's retry policy;
// scripted paths are relative to the agent's directory.
func newModel(spec, dir string, retry retryPolicy) (model.Model, error) {
	kind, arg, ok := strings.Cut(spec, ":")
	if !ok || arg == "" {
		return nil, fmt.Errorf("model %q: want scripted:<file>, openai:<model> or anthropic:<model>", spec)
	}
	switch kind {
	case "scripted":
		return loadScript(filepath.Join(dir, arg))
	case "openai":
		return openai.New(openai.Config{Model: arg, MaxRetries: retry.maxRetries(), RetryMaxWait: retry.maxWait,
			BackoffBase: retry.backoff, BackoffMax: retry.maxBackoff})
	case "anthropic":
		return anthropic.New(anthropic.Config{Model: arg, MaxRetries: retry.maxRetries(), RetryMaxWait: retry.maxWait,
			BackoffBase: retry.backoff, BackoffMax: retry.maxBackoff})
	}
	return nil, fmt.Errorf("model %q: unknown provider %q", spec, kind)
}

// maxRetries is the adapters' MaxRetries for the policy: negative turns
// retries off, zero would mean the adapter's default.
func (p retryPolicy) maxRetries() int {
	if p.attempts <= 1 {
		return -1
	}
	return p.attempts - 1
}

// scriptFile is a scripted model as YAML: the responses in order.
type scriptFile struct {
	Steps []struct {
		Text  string `json:"text"`
		Calls []struct {
			ID   string          `json:"id"`
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		} `json:"calls"`
	} `json:"steps"`
}

func loadScript(path string) (*model.Scripted, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	var f scriptFile
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("script %s: %w", path, err)
	}
	// The node serves the script for as long as it runs: it keeps none of
	// the requests (a copy of each, for tests, by default).
	s := &model.Scripted{NoRecord: true}
	for i, st := range f.Steps {
		var parts []model.Part
		if st.Text != "" {
			parts = append(parts, model.Part{Type: model.PartText, Text: st.Text})
		}
		for j, c := range st.Calls {
			if c.ID == "" || c.Name == "" {
				return nil, fmt.Errorf("script %s: steps[%d].calls[%d]: id and name are required", path, i, j)
			}
			args := string(c.Args)
			if args == "" || args == "null" {
				args = "{}"
			}
			parts = append(parts, model.Call(c.ID, c.Name, args))
		}
		r := model.Reply(parts...)
		// A script's usage is its text size: the totals stay meaningful.
		r.Usage = model.Usage{InputTokens: int64(100 * (i + 1)), OutputTokens: int64(len(js) / max(len(f.Steps), 1) / 16)}
		s.Steps = append(s.Steps, r)
	}
	return s, nil
}
