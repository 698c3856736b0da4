package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/kvcap"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// nodeOptions are what every verb that runs a node shares.
type nodeOptions struct {
	agentsDir string
	data      string
	natsURL   string
	// stream is the run log's stream (--stream; "" means the default).
	stream  string
	cluster clusterOptions // serve only: see cluster.go
	model   string
	noSync  bool
	// groupCommit is how the store groups commits (--group-commit).
	groupCommit commitMode
	logger      *slog.Logger
	sink        func(events.Run, runtime.SinkEvent)
	metrics     *metrics
	// keys seal the events the node writes and open the ones it reads
	// (--payload-keys); nil ring: plain events.
	keys payloadKeys
	// secrets are the secrets, by name, the command was given besides
	// those the node reads itself (serve's tokens): the node's redactor
	// registers them too (redact.go).
	secrets secretNames
	// mcpServers is the file of MCP servers whose tools are capabilities
	// (capabilities/mcp); empty means none.
	mcpServers string
	// schemaLevel caps the schema version the node writes (--schema-level;
	// zero: this build's).
	schemaLevel schemaLevel
	// writeFaults, set by startApp, is where the node's store and its
	// embedded server record the writes JetStream failed to store: the
	// node's readiness follows them (actors.Node.Ready).
	writeFaults *jetstream.WriteFaults
	// discover is how long to wait for capability services to answer at
	// start; zero means 300ms with --nats and none with the embedded server
	// (nothing else can be connected to it yet).
	discover time.Duration
	// servePinned (serve) deploys the agents whose files the gate accepts
	// and refuses the others, each logged with its file and field, rather
	// than stopping: runs pinned to a refused agent's earlier versions go
	// on (loadDeploymentServing).
	servePinned bool
	// jsWorkers bounds the JavaScript worker processes (--js-workers;
	// zero: jsexec.DefaultWorkers(), twice the CPUs and at least 4).
	jsWorkers int
}

func (o nodeOptions) discoverWait() time.Duration {
	switch {
	case o.discover > 0:
		return o.discover
	case o.natsURL != "":
		return 300 * time.Millisecond
	}
	return time.Millisecond
}

// app is a running node with what the verbs need around it.
type app struct {
	dep *deployment
	nc  *nats.Conn
	js  njs.JetStream
	// kv is the bucket of the kv capability (kvcap).
	kv   njs.KeyValue
	node *actors.Node
	// health reports what keeps the embedded NATS server's JetStream from
	// storing until it restarts (jetstream.Server.Healthy); nil with an
	// external server.
	health func() error
	// red redacts what the node's views hand out (the runs' redactor).
	red runtime.Redactor
	// keys open the sealed events the views read (nil: none are).
	keys *events.Keyring
	// stream is the run log's stream.
	stream string
	// close stops the node (draining its attempts until ctx is done or
	// its DrainTimeout), its MCP servers and its NATS connection, once.
	close func(ctx context.Context)
}

// source is the log the node's views read: its stream, opened with its
// payload keys.
func (a *app) source() projections.Source {
	return projections.Source{JS: a.js, Stream: a.stream, Keys: a.keys}
}

// streamFlag is --stream: the run log's stream, a name JetStream takes.
func streamFlag(fs *flag.FlagSet, s *string) {
	*s = events.DefaultStream
	fs.Var((*streamName)(s), "stream", "the run log's JetStream stream (one per deployment: its nodes, replay and consumers name the same)")
}

type streamName string

func (s *streamName) String() string { return string(*s) }

func (s *streamName) Set(v string) error {
	if err := events.CheckStreamName(v); err != nil {
		return fmt.Errorf("not a stream name: %w", err)
	}
	*s = streamName(v)
	return nil
}

func startApp(ctx context.Context, o nodeOptions) (*app, error) {
	load := loadDeployment
	if o.servePinned {
		load = loadDeploymentServing
	}
	dep, err := load(o.agentsDir)
	if err != nil {
		return nil, err
	}
	models, err := dep.models(o)
	if err != nil {
		return nil, err
	}
	o.writeFaults = &jetstream.WriteFaults{}
	nc, closeNATS, health, err := connectWatched(o)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			closeNATS()
		}
	}()
	js, err := njs.New(nc)
	if err != nil {
		return nil, err
	}
	var kv njs.KeyValue
	err = jetstream.Setup(ctx, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, njs.KeyValueConfig{Bucket: "cairn_kv", Storage: njs.FileStorage, Replicas: o.cluster.replicaCount()})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	executors, err := jsexec.New(jsexec.WithWorkers(o.jsWorkers))
	if err != nil {
		return nil, err
	}
	ext, err := discover(ctx, nc, o.discoverWait())
	if err != nil {
		return nil, err
	}
	caps, err := catalog(kvcap.Capabilities(), ext)
	if err != nil {
		return nil, err
	}
	if o.servePinned {
		dep.refuseUncatalogued(caps)
		if len(dep.agents) == 0 {
			return nil, dep.refused[0]
		}
		for _, r := range dep.refused {
			o.logger.Error("agent file refused: its agent is not deployed (runs pinned to its earlier versions go on); fix the file and restart",
				"file", r.File, "field", r.Field, "reason", r.Reason)
		}
	}
	mcpHost, caps, route, err := withMCP(ctx, o, dep, js, caps, backends(kvcap.For(kv, o.keys.ring), nc, ext))
	if err != nil {
		return nil, err
	}
	defer func() {
		if !started {
			_ = mcpHost.Close(context.Background())
		}
	}()
	red := nodeRedactor(o) // every secret the node is given (redact.go)
	cfg := actors.Config{
		Conn: nc, Agents: dep.list(),
		Model:        models.build,
		Capabilities: caps, BackendFor: route, Executors: executors,
		Redactor: red, Sink: o.sink, Logger: o.logger,
	}
	cfg.SchemaLevel = int(o.schemaLevel)
	cfg.Store.GroupCommit.Mode = jetstream.CommitMode(o.groupCommit)
	cfg.Store.Keys = o.keys.ring
	cfg.Store.Stream = o.stream
	cfg.Store.WriteFaults = o.writeFaults
	if o.metrics != nil {
		cfg.Store.OnCommit = o.metrics.commit
		cfg.Store.OnBatch = o.metrics.batch
		cfg.OnAttempt = o.metrics.attempt
		inner := o.sink
		cfg.Sink = func(r events.Run, ev runtime.SinkEvent) {
			o.metrics.event(r, ev)
			if inner != nil {
				inner(r, ev)
			}
		}
	}
	if err := o.cluster.configure(ctx, js, &cfg); err != nil {
		return nil, err
	}
	node, err := actors.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	started = true
	var once sync.Once
	return &app{dep: dep, nc: nc, js: js, kv: kv, node: node, health: health, red: red, keys: o.keys.ring, stream: events.StreamName(o.stream), close: func(ctx context.Context) {
		once.Do(func() {
			// The drain is bounded by ctx and the node's DrainTimeout;
			// the process is on its way out, so an error is logged, not
			// returned.
			if err := node.Close(ctx); err != nil && o.logger != nil {
				o.logger.Warn("node: close", "err", err)
			}
			_ = mcpHost.Close(context.WithoutCancel(ctx))
			closeNATS()
		})
	}}, nil
}

func connect(o nodeOptions) (*nats.Conn, func(), error) {
	nc, closeFn, _, err := connectWatched(o)
	return nc, closeFn, err
}

// connectWatched is connect that also returns the embedded server's
// health (nil with an external server).
func connectWatched(o nodeOptions) (*nats.Conn, func(), func() error, error) {
	if o.natsURL != "" {
		opts := []nats.Option{nats.MaxReconnects(-1)}
		if o.cluster.tlsCA != "" {
			opts = append(opts, nats.RootCAs(o.cluster.tlsCA))
		}
		nc, err := nats.Connect(o.natsURL, opts...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("nats %s: %w", o.natsURL, err)
		}
		return nc, nc.Close, nil, nil
	}
	scfg, err := o.cluster.serverConfig(jetstream.ServerConfig{StoreDir: filepath.Join(o.data, "jetstream"), Port: -1, NoSync: o.noSync, Stream: o.stream,
		WriteFaults: o.writeFaults})
	if err != nil {
		return nil, nil, nil, err
	}
	// No client connects without credentials, the node's own in-process
	// connection included (creds.go).
	if scfg.Credentials, err = jetstream.LoadOrCreateCredentials(credentialsPath(o.data)); err != nil {
		return nil, nil, nil, err
	}
	if scfg.Cluster != nil {
		if scfg.Cluster.Secret, err = routeSecret(); err != nil {
			return nil, nil, nil, err
		}
	}
	if scfg.Cluster != nil {
		nc, closeFn, err := o.cluster.connectEmbedded(scfg, o)
		health := func() error {
			o.cluster.embedded.mu.Lock()
			srv := o.cluster.embedded.srv
			o.cluster.embedded.mu.Unlock()
			if srv == nil { // shut down: the node is closing
				return nil
			}
			return srv.Healthy()
		}
		return nc, closeFn, health, err
	}
	srv, err := jetstream.StartServer(scfg)
	if err != nil {
		return nil, nil, nil, err
	}
	nc, err := srv.Connect()
	if err != nil {
		_ = srv.Close(context.Background())
		return nil, nil, nil, err
	}
	return nc, func() { nc.Close(); _ = srv.Close(context.Background()) }, srv.Healthy, nil
}

// commitMode is the --group-commit flag (CAIRN_GROUP_COMMIT): adaptive (the
// default), single (any JetStream server; atomic batches need nats-server
// 2.12+) or batch.
type commitMode jetstream.CommitMode

func (m *commitMode) String() string {
	if m == nil || *m == "" {
		return string(jetstream.CommitAdaptive)
	}
	return string(*m)
}

func (m *commitMode) Set(s string) error {
	switch jetstream.CommitMode(s) {
	case jetstream.CommitAdaptive, jetstream.CommitSingle, jetstream.CommitBatch:
		*m = commitMode(s)
		return nil
	}
	return fmt.Errorf("%q: want adaptive, single or batch", s)
}

// groupCommitFlag registers --group-commit on fs (CAIRN_GROUP_COMMIT
// through parseFlags).
// schemaLevel is --schema-level: the highest schema version the node
// writes, 1 to this build's.
type schemaLevel int

func (l *schemaLevel) String() string {
	if *l == 0 {
		return strconv.Itoa(events.SchemaVersion)
	}
	return strconv.Itoa(int(*l))
}

func (l *schemaLevel) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > events.SchemaVersion {
		return fmt.Errorf("%q: want a schema version from 1 to %d (this build's)", v, events.SchemaVersion)
	}
	*l = schemaLevel(n)
	return nil
}

func groupCommitFlag(fs *flag.FlagSet, m *commitMode) {
	fs.Var(m, "group-commit", "how commits are grouped: adaptive (one by one while few are in flight, atomic batches when many runs commit at once), single (one by one: any JetStream server), batch")
}
