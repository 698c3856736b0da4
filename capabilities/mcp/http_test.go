package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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
	defer h.Close(context.Background())
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

// everythingHTTP starts server-everything in streamable-HTTP mode on port
// and returns when it listens; stop kills it.
func everythingHTTP(t *testing.T, port string) (stop func()) {
	t.Helper()
	everything, _ := npmServers(t)
	cmd := exec.Command("node", everything.Command[1], "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+port)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "listening on port") {
			break
		}
	}
	go func() {
		for sc.Scan() {
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestStreamableHTTPEverything: server-everything over streamable HTTP.
// Killed and started again on the same port, it is reconnected: a call may
// fail once with ErrServerLost (the old session died under it), the next
// one is served by the new process.
func TestStreamableHTTPEverything(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	stop := everythingHTTP(t, port)
	sc := ServerConfig{Name: "remote", URL: "http://127.0.0.1:" + port + "/mcp", Tools: []string{"echo", "get-tiny-image"}, Agents: []string{"agent"}}
	h, err := Start(context.Background(), &Config{Servers: []ServerConfig{sc}}, Options{Blobs: &memBlobs{}, MinBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	v, err := invoke(h, "agent", "remote.echo", `{"message":"over http"}`)
	if err != nil || text(t, v) != "Echo: over http" {
		t.Fatalf("echo: %s %v", v.JSON, err)
	}
	if v, err := invoke(h, "agent", "remote.get_tiny_image", `{}`); err != nil || len(v.Attachments) != 1 {
		t.Fatalf("image: %s %v", v.JSON, err)
	}
	stop()
	everythingHTTP(t, port)
	v, err = invoke(h, "agent", "remote.echo", `{"message":"again"}`)
	if errors.Is(err, ErrServerLost) {
		t.Logf("first call after the restart: %v", err)
		v, err = invoke(h, "agent", "remote.echo", `{"message":"again"}`)
	}
	if err != nil || text(t, v) != "Echo: again" {
		t.Fatalf("after the server restarted: %s %v", v.JSON, err)
	}
}
