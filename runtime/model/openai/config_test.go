package openai

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
	tests := []struct {
		name    string
		cfg     Config
		env     map[string]string
		wantErr bool
	}{
		{name: "minimal OpenAI", cfg: Config{Model: "gpt-4.1-mini", APIKey: "sk-cfg-test-9f8e7d"}},
		{name: "no model", cfg: Config{APIKey: "sk-cfg-test-9f8e7d"}, wantErr: true},
		{name: "blank model", cfg: Config{Model: "  ", APIKey: "sk-cfg-test-9f8e7d"}, wantErr: true},
		{name: "OpenAI without a key", cfg: Config{Model: "m"}, wantErr: true},
		{name: "key from the environment", cfg: Config{Model: "m"}, env: map[string]string{EnvAPIKey: "sk-cfg-test-9f8e7d"}},
		{name: "local server needs no key", cfg: Config{Model: "llama3.1", BaseURL: "http://localhost:11434/v1"}},
		{name: "base URL from the environment", cfg: Config{Model: "m"}, env: map[string]string{EnvBaseURL: "http://127.0.0.1:8000/v1"}},
		{name: "relative base URL", cfg: Config{Model: "m", BaseURL: "/v1"}, wantErr: true},
		{name: "ftp base URL", cfg: Config{Model: "m", BaseURL: "ftp://host/v1"}, wantErr: true},
		{name: "credentials in the base URL", cfg: Config{Model: "m", BaseURL: "https://user:pw@host/v1"}, wantErr: true},
		{name: "unknown API", cfg: Config{Model: "m", APIKey: "sk-cfg-test-9f8e7d", API: "assistants"}, wantErr: true},
		{name: "responses API", cfg: Config{Model: "m", APIKey: "sk-cfg-test-9f8e7d", API: APIResponses}},
		{name: "negative timeout", cfg: Config{Model: "m", APIKey: "sk-cfg-test-9f8e7d", RequestTimeout: -time.Second}, wantErr: true},
		{name: "negative wait budget", cfg: Config{Model: "m", APIKey: "sk-cfg-test-9f8e7d", RetryMaxWait: -time.Second}, wantErr: true},
		{name: "bad max tokens param", cfg: Config{Model: "m", APIKey: "sk-cfg-test-9f8e7d", MaxTokensParam: "max"}, wantErr: true},
		{name: "key with a line break", cfg: Config{Model: "m", APIKey: "sk-cfg\nX-Evil: 1"}, wantErr: true},
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
			m, nerr := New(tt.cfg)
			if (nerr != nil) != tt.wantErr || (nerr == nil && m == nil) {
				t.Fatalf("New = %v, %v", m, nerr)
			}
			if err != nil && tt.cfg.APIKey != "" && strings.Contains(err.Error(), tt.cfg.APIKey) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Setenv(EnvBaseURL, "")
	c, err := Config{Model: "m", APIKey: "sk-cfg-test-9f8e7d"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if c.API != APIChat || c.BaseURL != DefaultBaseURL || c.MaxRetries != DefaultMaxRetries || c.RetryMaxWait != DefaultRetryMaxWait ||
		c.RequestTimeout != DefaultRequestTimeout || c.MaxTokensParam != MaxTokensCompletion || c.HTTPClient == nil || c.Sleep == nil {
		t.Fatalf("defaults: %+v", c)
	}
	c, _ = Config{Model: "m", BaseURL: "http://localhost:1234/v1"}.resolve()
	if c.MaxTokensParam != MaxTokensLegacy {
		t.Fatalf("a compatible server gets %q", c.MaxTokensParam)
	}
}

// The environment's key and base URL are used when the Config has none.
func TestConfigFromEnvironment(t *testing.T) {
	f := newFakeServer(t, ok(chatTextBody))
	t.Setenv(EnvAPIKey, "sk-from-env")
	t.Setenv(EnvBaseURL, f.URL())
	m, err := New(Config{Model: "gpt-env"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Generate(context.Background(), hi()); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	if r.header.Get("Authorization") != "Bearer sk-from-env" || r.body["model"] != "gpt-env" {
		t.Fatalf("auth %q model %v", r.header.Get("Authorization"), r.body["model"])
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		api     API
		raw     string
		wantErr string // the option named by the error; "" means valid, "-" the options as a whole
	}{
		{name: "none", api: APIChat, raw: ``},
		{name: "null", api: APIChat, raw: `null`},
		{name: "empty object", api: APIChat, raw: `{}`},
		{name: "all chat options", api: APIChat, raw: `{"temperature":1,"top_p":0.5,"reasoning_effort":"high","verbosity":"low","parallel_tool_calls":true,
			"tool_choice":"auto","service_tier":"flex","user":"u","prompt_cache_key":"k","extra_body":{"top_k":3},"frequency_penalty":1,"presence_penalty":-1,"seed":3,"stop":["a"]}`},
		{name: "all responses options", api: APIResponses, raw: `{"temperature":1,"reasoning_effort":"medium","reasoning_summary":"auto","store":true,"encrypted_reasoning":false}`},
		{name: "unknown option", api: APIChat, raw: `{"temprature":0.5}`, wantErr: "temprature"},
		{name: "a responses option in chat", api: APIChat, raw: `{"reasoning_summary":"auto"}`, wantErr: "reasoning_summary"},
		{name: "a chat option in responses", api: APIResponses, raw: `{"seed":1}`, wantErr: "seed"},
		{name: "wrong type", api: APIChat, raw: `{"temperature":"hot"}`, wantErr: "temperature"},
		{name: "out of range", api: APIChat, raw: `{"temperature":3}`, wantErr: "temperature"},
		{name: "bad effort", api: APIChat, raw: `{"reasoning_effort":"max"}`, wantErr: "reasoning_effort"},
		{name: "bad tool choice", api: APIChat, raw: `{"tool_choice":"any"}`, wantErr: "tool_choice"},
		{name: "too many stops", api: APIChat, raw: `{"stop":["a","b","c","d","e"]}`, wantErr: "stop"},
		{name: "extra_body sets the model", api: APIChat, raw: `{"extra_body":{"model":"other"}}`, wantErr: "extra_body"},
		{name: "extra_body streams", api: APIChat, raw: `{"extra_body":{"stream":true}}`, wantErr: "extra_body"},
		{name: "not an object", api: APIChat, raw: `[1]`, wantErr: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseOptions(json.RawMessage(tt.raw), tt.api)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseOptions: %v", err)
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

// Bad options fail before anything is sent.
func TestOptionsRejectedBeforeSending(t *testing.T) {
	f := newFakeServer(t, ok(chatTextBody))
	m, _ := newTestModel(t, f, APIChat)
	req := hi()
	req.Options = json.RawMessage(`{"temperature":0.1,"frobnicate":true}`)
	if err := m.ValidateOptions(req.Options); !errors.Is(err, ErrOptions) {
		t.Fatalf("ValidateOptions = %v", err)
	}
	_, err := m.Generate(context.Background(), req)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "frobnicate" {
		t.Fatalf("err = %v", err)
	}
	if len(f.requests()) != 0 {
		t.Fatal("a request with bad options was sent")
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
	for _, api := range []API{APIChat, APIResponses} {
		for _, tt := range tests {
			t.Run(string(api)+"/"+tt.name, func(t *testing.T) {
				f := newFakeServer(t)
				m, _ := newTestModel(t, f, api)
				if _, err := m.Generate(context.Background(), tt.req); !errors.Is(err, ErrRequest) {
					t.Fatalf("err = %v, want ErrRequest", err)
				}
				if len(f.requests()) != 0 {
					t.Fatal("sent anyway")
				}
			})
		}
	}
}
