package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/cairn-agents/cairn/runtime/jsexec"
)

// TestMain lets the test binary serve as the JavaScript worker and as a
// small stdio MCP server (helperServer) that the supervision tests can
// crash and change at will.
func TestMain(m *testing.M) {
	jsexec.MaybeRunWorker()
	if os.Getenv(helperEnv) != "" {
		helperServer()
		os.Exit(0)
	}
	// Every server supervisor, session and reader is gone when the tests
	// are: a goroutine left behind is a leak.
	goleak.VerifyTestMain(m)
}

const (
	helperEnv      = "CAIRN_MCP_TEST_SERVER"
	helperCounter  = "CAIRN_MCP_TEST_COUNTER"
	helperBadTools = "CAIRN_MCP_TEST_BAD_SCHEMA"
)

// helperServer is a stdio MCP server:
//
//	count {n?}     appends a line to the counter file, returns the line count (effectful, no annotations)
//	crash {}       exits the process in the middle of the call
//	getenv {name}  returns an environment variable of the server
//	drop {}        removes count (tools/list_changed)
//	restore {}     adds count back
//	relabel {}     replaces count by one annotated read-only
//	pick {kind, size?}   an input schema with if/then/else (converted at start)
//	bad {}         only with CAIRN_MCP_TEST_BAD_SCHEMA set: a schema with patternProperties
func helperServer() {
	srv := sdk.NewServer(&sdk.Implementation{Name: "helper", Version: "1"}, nil)
	counter := os.Getenv(helperCounter)
	var mu sync.Mutex
	count := &sdk.Tool{Name: "count", Description: "Count a call.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`)}
	countHandler := func(_ context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(counter, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(f, "call")
		f.Close()
		b, _ := os.ReadFile(counter)
		n := strings.Count(string(b), "\n")
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "count=" + strconv.Itoa(n)}}}, nil
	}
	srv.AddTool(count, countHandler)
	srv.AddTool(&sdk.Tool{Name: "crash", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			fmt.Fprintln(os.Stderr, "helper: crashing now")
			os.Exit(3)
			return nil, nil
		})
	srv.AddTool(&sdk.Tool{Name: "getenv", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Name string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "value=" + os.Getenv(args.Name)}}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "drop", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			srv.RemoveTools("count")
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "dropped"}}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "relabel", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			relabeled := *count
			relabeled.Annotations = &sdk.ToolAnnotations{ReadOnlyHint: true}
			srv.AddTool(&relabeled, countHandler)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "relabeled"}}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "restore", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			srv.AddTool(count, countHandler)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "restored"}}}, nil
		})
	srv.AddTool(&sdk.Tool{Name: "pick", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: json.RawMessage(`{"type":"object","required":["kind"],"properties":{"kind":{"enum":["box","bag"]},"size":{"type":"integer"}},` +
			`"if":{"properties":{"kind":{"const":"box"}}},"then":{"required":["size"]}}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	if os.Getenv(helperBadTools) != "" {
		srv.AddTool(&sdk.Tool{Name: "bad", InputSchema: json.RawMessage(`{"type":"object","patternProperties":{"^x-":{"type":"string"}}}`)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{}, nil
			})
	}
	fmt.Fprintln(os.Stderr, "helper server up; token=hunter2")
	if err := srv.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "helper server:", err)
	}
}

// helperConfig runs the test binary as the helper server.
func helperConfig(t *testing.T, tools ...string) (ServerConfig, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	counter := t.TempDir() + "/counter"
	return ServerConfig{Name: "helper", Command: []string{exe}, Env: map[string]string{helperEnv: "1", helperCounter: counter},
		Tools: tools, Agents: []string{"agent"}}, counter
}

// memBlobs is a BlobStore in memory: references are content hashes.
type memBlobs struct {
	mu   sync.Mutex
	data map[string][]byte
}

func (b *memBlobs) Put(_ context.Context, data []byte, mediaType string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.data == nil {
		b.data = map[string][]byte{}
	}
	sum := sha256.Sum256(data)
	ref := "mem://" + hex.EncodeToString(sum[:8])
	b.data[ref] = append([]byte(nil), data...)
	return ref, nil
}

func (b *memBlobs) get(ref string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.data[ref]
	return d, ok
}

type secretsOf string

func (s secretsOf) Redact(text string) string {
	return strings.ReplaceAll(text, string(s), "[REDACTED]")
}
