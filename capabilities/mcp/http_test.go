package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStreamableHTTPServer: a server configured by URL, with the
// configured headers on every request (here its bearer token).
func TestStreamableHTTPServer(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "remote", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "whoami", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "token " + req.Extra.Header.Get("Authorization")}}}, nil
		})
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sekrit" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	defer hs.Close()
	sc := ServerConfig{Name: "remote", URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer sekrit"}, Tools: []string{"whoami"}, Agents: []string{"agent"}}

	h, err := Start(context.Background(), &Config{Servers: []ServerConfig{sc}}, Options{Redactor: secretsOf("sekrit")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	v, err := invoke(h, "agent", "remote.whoami", `{}`)
	if err != nil {
		t.Fatal(err)
	}
	// The server echoes the header: the backend redacts the servers'
	// secrets it was given before the value leaves it.
	if got := text(t, v); got != "token Bearer [REDACTED]" {
		t.Errorf("text = %q", got)
	}

	sc.Headers = nil
	if _, err := Start(context.Background(), &Config{Servers: []ServerConfig{sc}}, Options{}); err == nil || !strings.Contains(err.Error(), "mcp: server remote: connect") {
		t.Errorf("without the header: err = %v", err)
	}
}
