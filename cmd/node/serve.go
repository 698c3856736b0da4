package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cairn-agents/cairn/api"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/mcpserver"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/web"
)

// serveOptions configure `node serve`. Precedence: flags, then CAIRN_*
// environment variables, then defaults.
type serveOptions struct {
	nodeOptions
	listen string
	// tokens maps a bearer token to its principal (the runs' owner).
	tokens map[string]string
	// raw are the principals whose views are not redacted
	// (--raw-principals): they see the secrets their runs saw.
	raw string
	// metricsToken is the bearer token /metrics requires
	// (--metrics-token); empty: none.
	metricsToken string
	// retention is how long a finished session is kept (--retention; an
	// agent's own overrides it), retentionSweep the time between sweeps.
	retention      retentionFlag
	retentionSweep time.Duration
	// hooks stop serve at fixed points (tests).
	hooks serveHooks
}

// serveHooks are called at fixed points of serve's start; nil ones are not.
type serveHooks struct {
	// memberStarted is called once the node's member started, before
	// the run index starts.
	memberStarted func()
}

func serveCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveOptions{}
	fs.StringVar(&o.agentsDir, "agents", "examples/agents", "directory of agent definitions")
	fs.StringVar(&o.data, "data", ".cairn", "JetStream data directory of the embedded server")
	fs.StringVar(&o.natsURL, "nats", "", "existing NATS server URL")
	fs.StringVar(&o.model, "model", "", "model for every agent")
	fs.BoolVar(&o.noSync, "nosync", false, "embedded server without SyncAlways")
	groupCommitFlag(fs, &o.groupCommit)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8700", "HTTP address")
	fs.StringVar(&o.mcpServers, "mcp-servers", "", "file of MCP servers whose tools are capabilities (YAML or JSON)")
	fs.IntVar(&o.jsWorkers, "js-workers", 0, "JavaScript worker processes at most; a run_js script that finds them all busy waits for one (0: twice the CPUs, at least 4)")
	payloadKeysFlag(fs, &o.keys)
	streamFlag(fs, &o.stream)
	token := fs.String("token", "", "bearer token of the default principal")
	fs.StringVar(&o.raw, "raw-principals", "", "comma-separated principals whose views of their own runs are not redacted (see docs/operations.md, Security)")
	metricsTokenFlag(fs, &o.metricsToken) // metrics.go
	retentionFlags(fs, &o.retention, &o.retentionSweep)
	fs.Var(&o.schemaLevel, "schema-level", "the highest schema version this node writes (default: this build's); pin it during an upgrade to keep a rollback to the build before possible")
	logs := logFlags(fs)
	config := fs.String("config", "", "configuration file (YAML or JSON); flags and CAIRN_* variables override it")
	o.cluster.flags(fs) // cluster.go
	if err := parseFlags(fs, args, append([]string{"agents", "data", "nats", "model", "group-commit", "mcp-servers", "js-workers", "payload-keys", "log", "log-level", "config", "listen", "token", "raw-principals", "metrics-token", "stream", "retention", "retention-sweep", "schema-level"}, clusterFlagNames...)...); err != nil {
		return parseFailed(stderr, "node serve", err)
	}
	if *config != "" {
		if err := applyConfig(fs, *config); err != nil {
			fmt.Fprintln(stderr, "node serve:", err)
			return 2
		}
	}
	if err := o.cluster.validate(o.natsURL); err != nil {
		fmt.Fprintln(stderr, "node serve:", err)
		return 2
	}
	if o.cluster.natsCluster != "" {
		// Refused with the other flags, before anything starts.
		if _, err := routeSecret(); err != nil {
			fmt.Fprintln(stderr, "node serve:", err)
			return 2
		}
	}
	tokens, err := parseTokens(os.Getenv("CAIRN_TOKENS"))
	if err != nil {
		fmt.Fprintln(stderr, "node serve:", err)
		return 2
	}
	o.tokens = tokens
	if *token != "" {
		o.tokens[*token] = "default"
	}
	o.logger = logs.logger(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, o, nil); err != nil {
		fmt.Fprintln(stderr, "node serve:", err)
		return 1
	}
	return 0
}

// parseTokens reads "alice=tok1,bob=tok2" (CAIRN_TOKENS). A pair that is
// not principal=token, or a token given twice, is an error naming the pair
// by its position and principal, never by its token: a typo must not leave
// a principal locked out, or two principals sharing one token, unnoticed.
func parseTokens(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, pair := range strings.Split(s, ",") {
		owner, tok, ok := strings.Cut(strings.TrimSpace(pair), "=")
		owner, tok = strings.TrimSpace(owner), strings.TrimSpace(tok)
		switch {
		case !ok: // the entry may be a bare token: never print it
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d has no '=': want principal=token, comma-separated", i+1)
		case owner == "":
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d has no principal before its '='", i+1)
		case tok == "":
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d (principal %q) has no token", i+1, owner)
		case out[tok] != "":
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d (principal %q): its token is also %q's", i+1, owner, out[tok])
		}
		out[tok] = owner
	}
	return out, nil
}

// loopback reports whether addr listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serve runs the node and its HTTP API until ctx ends. ready, when set,
// receives the bound address.
func serve(ctx context.Context, o serveOptions, ready chan<- string) error {
	if !loopback(o.listen) && len(o.tokens) == 0 {
		return fmt.Errorf("listening on %s needs authentication: set --token or CAIRN_TOKENS", o.listen)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	m := newMetrics()
	m.token = o.metricsToken
	o.metrics = m
	// The tokens, for the node's redactor (redact.go).
	o.secrets = serveSecrets(o)
	o.servePinned = true  // a refused agent file stops no run in flight (deploy.go)
	started := time.Now() // cairn_run_seconds counts the ends from here on
	// From here until it serves, the node says every few seconds what
	// its start waits for: a start that waits for peers or a quorum is
	// never silent.
	st := newStarting(o.logger, nil)
	defer st.end()
	logStart(o)
	a, err := startMember(ctx, o.nodeOptions, st) // startApp, waited for and retried in a cluster (cluster.go)
	if err != nil {
		return stoppedStarting(ctx, o, err)
	}
	defer a.close(context.Background())
	if o.hooks.memberStarted != nil {
		o.hooks.memberStarted()
	}
	// The run index and the retention read the log: a quorum lost since
	// the member started is waited out, as the member's own start does.
	waits := func(err error) bool { return !startWaits(err) }
	var ix *runindex.Index
	err = st.await(ctx, wait{what: "the run index (it reads the run log)", detail: o.cluster.natsDetail, permanent: waits}, func(ctx context.Context) (err error) {
		ix, err = runindex.Start(ctx, a.source(), runindex.Hooks{OnEnd: m.runEnded(a.node.WasHolder, started)})
		return err
	})
	if err != nil {
		return stoppedStarting(ctx, o, err)
	}
	defer ix.Close(context.Background())
	m.index = ix
	var closeRetention func(context.Context)
	err = st.await(ctx, wait{what: "the retention sweeper (it reads the run log)", detail: o.cluster.natsDetail, permanent: waits}, func(ctx context.Context) (err error) {
		closeRetention, err = startRetention(ctx, o, a, ix)
		return err
	})
	if err != nil {
		return stoppedStarting(ctx, o, err)
	}
	defer closeRetention(context.Background())
	raw, err := rawPrincipals(o.raw, o.tokens)
	if err != nil {
		return err
	}
	apiSrv, err := api.New(api.Config{Node: a.node, Index: ix, JS: a.js, Stream: a.stream, Keys: a.keys, Redactor: a.red, Tokens: o.tokens, Raw: raw,
		Setup: func(ctx context.Context, run events.Run) (replay.Setup, error) {
			return setupForRun(ctx, a.dep, a.node, run)
		},
		ForkStore: func(ctx context.Context) (*jetstream.Store, error) {
			return logStore(ctx, a.nc, a.js, a.stream, "fork", a.keys)
		},
		Logger: o.logger})
	if err != nil {
		return err
	}
	// Streams never go idle: they end when the server begins to stop,
	// or its shutdown would wait out its deadline for them.
	stopping, stopStreams := context.WithCancel(context.Background())
	defer stopStreams()
	mux := http.NewServeMux()
	apiSrv.Register(mux, stopping)
	mux.Handle("GET /metrics", m)
	web.Register(mux)
	// Cairn as an MCP server, behind the same tokens.
	mcpSrv, err := mcpserver.New(mcpserver.Config{Node: a.node, Agents: a.dep.list, Redactor: a.red, Index: ix, Logger: o.logger})
	if err != nil {
		return err
	}
	mux.Handle("/mcp", api.UntilStopping(stopping, mcpserver.Handler(mcpSrv, apiSrv, o.logger)))
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api.Guard(mux, len(o.tokens) > 0), ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(stopStreams)
	st.end()
	if ready != nil {
		ready <- ln.Addr().String()
	}
	o.logger.Info("node serving", "addr", ln.Addr().String(), "agents", len(a.dep.agents), "auth", len(o.tokens) > 0)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The embedded server's JetStream, once unable to store, stays so
	// until the server restarts: serve exits non-zero (watch.go).
	stored := make(chan error, 1)
	if a.health != nil {
		t := time.NewTicker(jetStreamCheck)
		defer t.Stop()
		go func() { stored <- watchJetStream(ctx, t.C, a.health, jetStreamStrikes) }()
	}
	var fatal error
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	case fatal = <-stored:
		if fatal != nil {
			o.logger.Error("node stops: a restart of the node restarts its NATS server", "err", fatal)
			// Nothing can commit until the restart: attempts are not
			// drained, they are cancelled at once (their runs resume
			// from their last commit after the restart).
			dead, cancel := context.WithCancel(context.Background())
			cancel()
			a.close(dead)
		}
	}
	// Graceful: stop taking requests; the deferred close stops the actors
	// (attempts end at a commit boundary or are resumed by the next owner).
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); fatal == nil {
		return err
	}
	return fatal
}

// logStart says, first thing, what the node starts as and, in a cluster,
// what it needs of the others.
func logStart(o serveOptions) {
	c := o.cluster
	switch {
	case c.natsCluster != "":
		o.logger.Info("node starting", "name", c.name, "listen", o.listen, "data", o.data, "routes_listen", c.natsCluster, "routes", c.natsRoutes,
			"replicas", c.replicaCount(), "needs", fmt.Sprintf("%d servers with JetStream for a new log, %d for an existing one", c.replicaCount(), c.replicaCount()/2+1))
	case c.on():
		o.logger.Info("node starting", "name", c.name, "listen", o.listen, "nats", redactedURL(o.natsURL), "replicas", c.replicaCount())
	default:
		o.logger.Info("node starting", "listen", o.listen, "data", o.data)
	}
}

// redactedURL is a NATS URL without its password ("" stays "").
func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil && s != "" {
		return u.Redacted()
	}
	return s
}

// stoppedStarting is serve's answer to a start that ended with err: a
// stop asked for while the node started (Ctrl-C, SIGTERM) is no failure.
func stoppedStarting(ctx context.Context, o serveOptions, err error) error {
	if ctx.Err() != nil {
		o.logger.Info("node stopped before it served", "err", err)
		return nil
	}
	return err
}

// rawPrincipals parses --raw-principals: each must be a principal the node
// knows (one of CAIRN_TOKENS's, "default" of --token, or "local" without
// tokens), so a typo grants nothing silently and is named.
func rawPrincipals(list string, tokens map[string]string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, who := range tokens {
		known[who] = true
	}
	if len(tokens) == 0 {
		known["local"] = true
	}
	out := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !known[p] {
			return nil, fmt.Errorf("--raw-principals: %q is no principal of this node (its principals: %s)", p, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		out[p] = true
	}
	return out, nil
}
