package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/runtime"
)

func TestParseConfig(t *testing.T) {
	ok := `servers:
  - name: everything
    command: [npx, -y, "@modelcontextprotocol/server-everything"]
    tools: [echo, get-sum]
    agents: [researcher]
    effects: {echo: idempotent}
  - name: remote
    url: https://mcp.example.com/mcp
    headers: {Authorization: "Bearer x"}
    tools: [search]
    agents: [researcher, writer]
    call_timeout: 10s
`
	cfg, err := ParseConfig([]byte(ok), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Servers) != 2 || cfg.Servers[0].Effects["echo"] != runtime.EffectIdempotent || cfg.Servers[1].URL == "" {
		t.Fatalf("cfg = %+v", cfg)
	}
	tests := []struct{ name, yaml, want string }{
		{"unknown field", "servers: [{name: a, command: [x], tools: [t], agents: [g], tool: [y]}]", `unknown field "tool"`},
		{"bad name", "servers: [{name: a-b, command: [x], tools: [t], agents: [g]}]", `servers[0]: name: "a-b" is not a JavaScript identifier`},
		{"both", "servers: [{name: a, command: [x], url: 'http://h', tools: [t], agents: [g]}]", "command and url: set one"},
		{"neither", "servers: [{name: a, tools: [t], agents: [g]}]", "command or url is required"},
		{"empty program", "servers: [{name: a, command: [''], tools: [t], agents: [g]}]", "command[0]"},
		{"bad url", "servers: [{name: a, url: 'ftp://h', tools: [t], agents: [g]}]", "url: \"ftp://h\""},
		{"headers on stdio", "servers: [{name: a, command: [x], headers: {A: b}, tools: [t], agents: [g]}]", "headers: only for a url server"},
		{"env on http", "servers: [{name: a, url: 'http://h', env: {A: b}, tools: [t], agents: [g]}]", "env and dir"},
		{"no tools", "servers: [{name: a, command: [x], agents: [g]}]", "tools: the allow-list is required"},
		{"tool twice", "servers: [{name: a, command: [x], tools: [t, t], agents: [g]}]", `tools[1]: "t" is listed twice`},
		{"no agents", "servers: [{name: a, command: [x], tools: [t]}]", "agents: list the agents"},
		{"effect of unlisted tool", "servers: [{name: a, command: [x], tools: [t], agents: [g], effects: {u: read-only}}]", "effects.u: not in tools"},
		{"bad effect", "servers: [{name: a, command: [x], tools: [t], agents: [g], effects: {t: safe}}]", `effects.t: "safe" is not`},
		{"bad timeout", "servers: [{name: a, command: [x], tools: [t], agents: [g], call_timeout: soon}]", "call_timeout"},
		{"duplicate server", "servers: [{name: a, command: [x], tools: [t], agents: [g]}, {name: a, command: [x], tools: [t], agents: [g]}]", `servers[1]: name: "a" is used twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml), true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestEffectOf(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name     string
		a        *sdk.ToolAnnotations
		override string
		want     string
	}{
		{"no annotations", nil, "", runtime.EffectEffectful},
		{"read-only", &sdk.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}, "", runtime.EffectReadOnly},
		{"idempotent destructive", &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes}, "", runtime.EffectIdempotent},
		{"additive", &sdk.ToolAnnotations{DestructiveHint: &no}, "", runtime.EffectEffectful},
		{"empty annotations", &sdk.ToolAnnotations{}, "", runtime.EffectEffectful},
		{"override wins", &sdk.ToolAnnotations{ReadOnlyHint: true}, runtime.EffectEffectful, runtime.EffectEffectful},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := effectOf(tc.a, tc.override); got != tc.want {
				t.Errorf("effectOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConvertResult(t *testing.T) {
	png := []byte("\x89PNG fake")
	blobs := &memBlobs{}
	res := &sdk.CallToolResult{
		Content: []sdk.Content{
			&sdk.TextContent{Text: "first"},
			&sdk.ImageContent{Data: png, MIMEType: "image/png"},
			&sdk.TextContent{Text: "second"},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "token s3cret"}},
			&sdk.ResourceLink{URI: "file:///b", Name: "b"},
		},
		StructuredContent: map[string]any{"n": 1},
	}
	v, err := convertResult(context.Background(), res, blobs, runtime.Secrets{"s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	var got resultValue
	if err := json.Unmarshal(v.JSON, &got); err != nil {
		t.Fatal(err)
	}
	if got.Text != "first\nsecond" || len(got.Attachments) != 2 || len(v.Attachments) != 2 || len(got.Links) != 1 {
		t.Fatalf("value = %s", v.JSON)
	}
	if string(v.JSON) == "" || strings.Contains(string(v.JSON), base64.StdEncoding.EncodeToString(png)) {
		t.Error("image bytes entered the value")
	}
	if d, ok := blobs.get(v.Attachments[0].Ref); !ok || string(d) != string(png) || v.Attachments[0].MediaType != "image/png" {
		t.Errorf("image attachment %+v not stored", v.Attachments[0])
	}
	if d, _ := blobs.get(v.Attachments[1].Ref); string(d) != "token [REDACTED]" || v.Attachments[1].Name != "file:///a.txt" {
		t.Errorf("text resource stored as %q (%+v)", d, v.Attachments[1])
	}
	if s, _ := got.Structured.(map[string]any); s["n"] != float64(1) {
		t.Errorf("structured = %v", got.Structured)
	}

	_, err = convertResult(context.Background(), &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "no such file"}}}, blobs, runtime.Secrets{})
	if !errors.Is(err, ErrToolError) || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("isError: err = %v", err)
	}
	_, err = convertResult(context.Background(), &sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{Data: png, MIMEType: "image/png"}}}, nil, runtime.Secrets{})
	if err == nil || !strings.Contains(err.Error(), "no attachment storage") {
		t.Errorf("image without storage: err = %v", err)
	}
}

// FuzzParseConfig: a configuration file never panics the parser, and what
// it accepts validates.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("servers: [{name: a, command: [x], tools: [t], agents: [g], effects: {t: read-only}}]"), true)
	f.Add([]byte(`{"servers":[{"name":"a","url":"http://h","headers":{"A":"b"},"tools":["t"],"agents":["g"],"call_timeout":"1s"}]}`), false)
	f.Add([]byte("servers: [{name: a, command: [''], tools: [t, t]}]"), true)
	f.Fuzz(func(t *testing.T, raw []byte, isYAML bool) {
		cfg, err := ParseConfig(raw, isYAML)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted a config that does not validate: %v", err)
		}
		for _, s := range cfg.Servers {
			if _, err := s.callTimeout(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
