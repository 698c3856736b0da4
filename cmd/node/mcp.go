package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/mcpserver"
	"github.com/cairn-agents/cairn/projections/runindex"
)

// mcpCmd is `node mcp`: a node whose MCP server speaks on stdin/stdout (its
// logs go to stderr).
func mcpCmd(args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := nodeOptions{}
	fs.StringVar(&o.agentsDir, "agents", "examples/agents", "directory of agent definitions")
	fs.StringVar(&o.data, "data", ".cairn", "JetStream data directory of the embedded server")
	fs.StringVar(&o.natsURL, "nats", "", "existing NATS server URL")
	fs.StringVar(&o.model, "model", "", "model for every agent")
	fs.BoolVar(&o.noSync, "nosync", false, "embedded server without SyncAlways")
	groupCommitFlag(fs, &o.groupCommit)
	fs.StringVar(&o.mcpServers, "mcp-servers", "", "file of MCP servers whose tools are capabilities (YAML or JSON)")
	payloadKeysFlag(fs, &o.keys)
	streamFlag(fs, &o.stream)
	logs := logFlags(fs)
	config := fs.String("config", "", "configuration file (YAML or JSON); flags and CAIRN_* variables override it")
	if err := parseFlags(fs, args, "agents", "data", "nats", "model", "group-commit", "mcp-servers", "payload-keys", "log", "log-level", "config", "stream"); err != nil {
		return parseFailed(stderr, "node mcp", err)
	}
	if *config != "" {
		if err := applyConfig(fs, *config); err != nil {
			fmt.Fprintln(stderr, "node mcp:", err)
			return 2
		}
	}
	o.logger = logs.logger(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := startApp(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "node mcp:", err)
		return 1
	}
	defer a.close(context.Background())
	// The run index tells get_run a run parked on its children.
	ix, err := runindex.Start(ctx, a.source(), runindex.Hooks{})
	if err != nil {
		fmt.Fprintln(stderr, "node mcp:", err)
		return 1
	}
	defer ix.Close(context.Background())
	o.logger.Info("node mcp serving on stdio", "agents", len(a.dep.agents))
	srv, err := mcpserver.New(mcpserver.Config{Node: a.node, Agents: a.dep.list, Redactor: a.red, Index: ix, Logger: o.logger})
	if err != nil {
		fmt.Fprintln(stderr, "node mcp:", err)
		return 1
	}
	err = srv.Run(ctx, &sdk.IOTransport{Reader: stdin, Writer: stdout})
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "node mcp:", err)
		return 1
	}
	return 0
}

// nopCloser lets `node mcp` hand its stdout writer to the transport, which
// closes it when the session ends: the process's stdout stays open.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
