package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/model"
)

func TestConfigValidate(t *testing.T) {
	t.Setenv(EnvAPIKey, "")
	t.Setenv(EnvBaseURL, "")
	const key = "sk-ant-cfg-test-9f8e7d"
	tests := []struct {
		name    string
		cfg     Config
		env     map[string]string
		wantErr bool
	}{
		{name: "minimal", cfg: Config{Model: "claude-sonnet-4-5", APIKey: key}},
		{name: "no model", cfg: Config{APIKey: key}, wantErr: true},
		{name: "no key for Anthropic", cfg: Config{Model: "m"}, wantErr: true},
		{name: "key from the environment", cfg: Config{Model: "m"}, env: map[string]string{EnvAPIKey: key}},
		{name: "a gateway may need no key", cfg: Config{Model: "m", BaseURL: "http://localhost:4000"}},
		{name: "base URL from the environment", cfg: Config{Model: "m"}, env: map[string]string{EnvBaseURL: "http://127.0.0.1:9"}},
		{name: "relative base URL", cfg: Config{Model: "m", APIKey: key, BaseURL: "api.anthropic.com"}, wantErr: true},
		{name: "credentials in the base URL", cfg: Config{Model: "m", BaseURL: "https://u:p@host"}, wantErr: true},
		{name: "negative max tokens", cfg: Config{Model: "m", APIKey: key, MaxTokens: -1}, wantErr: true},
		{name: "negative timeout", cfg: Config{Model: "m", APIKey: key, RequestTimeout: -time.Second}, wantErr: true},
		{name: "negative wait budget", cfg: Config{Model: "m", APIKey: key, RetryMaxWait: -time.Second}, wantErr: true},
		{name: "key with a line break", cfg: Config{Model: "m", APIKey: "sk-ant\nX: y"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			err := tt.cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrConfig) {
				t.Fatalf("err %v does not wrap ErrConfig", err)
			}
			if err != nil && tt.cfg.APIKey != "" && strings.Contains(err.Error(), tt.cfg.APIKey) {
				t.Fatalf("the error shows the key: %v", err)
			}
			if _, nerr := New(tt.cfg); (nerr != nil) != tt.wantErr {
				t.Fatalf("New = %v", nerr)
			}
		})
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	f := newFakeServer(t, ok(textBody))
	t.Setenv(EnvAPIKey, "sk-ant-from-env")
	t.Setenv(EnvBaseURL, f.URL())
	// Variables the SDK would otherwise read must change nothing.
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "other-token")
	t.Setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Injected: 1")
	m, err := New(Config{Model: "claude-env"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generate(context.Background(), hi()); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	if r.header.Get("Authorization") != "Bearer sk-ant-from-env" || r.header.Get("X-Injected") != "" || r.body["model"] != "claude-env" {
		t.Fatalf("headers %v model %v", r.header, r.body["model"])
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string // the option named by the error; "" means valid, "-" the options as a whole
	}{
		{name: "none", raw: ``},
		{name: "null", raw: `null`},
		{name: "all", raw: `{"temperature":0.5,"top_p":0.9,"top_k":5,"stop_sequences":["x"],"thinking":"enabled","thinking_budget":1024,
			"effort":"max","tool_choice":"any","disable_parallel_tool_use":false,"service_tier":"standard_only","metadata_user_id":"u","extra_body":{"speed":"fast"}}`},
		{name: "adaptive", raw: `{"thinking":"adaptive"}`},
		{name: "unknown", raw: `{"max_thinking":1}`, wantErr: "max_thinking"},
		{name: "an OpenAI option", raw: `{"reasoning_effort":"high"}`, wantErr: "reasoning_effort"},
		{name: "wrong type", raw: `{"top_k":"ten"}`, wantErr: "top_k"},
		{name: "temperature above 1", raw: `{"temperature":1.5}`, wantErr: "temperature"},
		{name: "budget too small", raw: `{"thinking_budget":100}`, wantErr: "thinking_budget"},
		{name: "enabled without budget", raw: `{"thinking":"enabled"}`, wantErr: "thinking"},
		{name: "budget with adaptive", raw: `{"thinking":"adaptive","thinking_budget":2048}`, wantErr: "thinking_budget"},
		{name: "bad tool choice", raw: `{"tool_choice":"required"}`, wantErr: "tool_choice"},
		{name: "extra_body sets max_tokens", raw: `{"extra_body":{"max_tokens":1}}`, wantErr: "extra_body"},
		{name: "not an object", raw: `"hot"`, wantErr: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseOptions(json.RawMessage(tt.raw))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			want := tt.wantErr
			if want == "-" { // the options as a whole
				want = ""
			}
			var oe *OptionError
			if !errors.Is(err, ErrOptions) || !errors.As(err, &oe) || oe.Option != want {
				t.Fatalf("err = %v, want an *OptionError for %q", err, tt.wantErr)
			}
		})
	}
}

func TestOptionsRejectedBeforeSending(t *testing.T) {
	f := newFakeServer(t, ok(textBody))
	m, _ := newTestModel(t, f)
	raw := json.RawMessage(`{"temperature":0.1,"frobnicate":true}`)
	if err := m.ValidateOptions(raw); !errors.Is(err, ErrOptions) {
		t.Fatalf("ValidateOptions = %v", err)
	}
	req := hi()
	req.Options = raw
	var oe *OptionError
	if _, err := m.Generate(context.Background(), req); !errors.As(err, &oe) || oe.Option != "frobnicate" {
		t.Fatalf("err = %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("sent anyway")
	}
}

func TestRequestErrors(t *testing.T) {
	tests := []struct {
		name string
		req  model.Request
	}{
		{"tool schema is not JSON", model.Request{Messages: hi().Messages, Tools: []model.ToolDef{{Name: "f", InputSchema: json.RawMessage(`{`)}}}},
		{"tool without a name", model.Request{Messages: hi().Messages, Tools: []model.ToolDef{{InputSchema: json.RawMessage(`{}`)}}}},
		{"unknown role", model.Request{Messages: []model.Message{{ID: "x", Role: "system", Parts: []model.Part{{Type: model.PartText, Text: "a"}}}}}},
		{"tool result without a call ID", model.Request{Messages: []model.Message{{ID: "x", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t)
			m, _ := newTestModel(t, f)
			if _, err := m.Generate(context.Background(), tt.req); !errors.Is(err, ErrRequest) {
				t.Fatalf("err = %v, want ErrRequest", err)
			}
			if len(f.requests()) != 0 {
				t.Fatal("sent anyway")
			}
		})
	}
}
