package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/cluster"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// clusterOptions make `node serve` one member of a Cairn cluster: the
// nodes share one NATS (each embedding a server that joins the others by
// routes, or an external NATS cluster), keep their membership in a KV
// bucket and place run actors among themselves by identity.
type clusterOptions struct {
	// enabled: join a Cairn cluster (implied by natsCluster).
	enabled bool
	// name of this node: its NATS server name (stable across restarts:
	// the JetStream peer) and the prefix of its member IDs.
	name string
	// listen is the host:port of the member's actor remote (gRPC).
	listen string
	// advertise is the host other members dial, when it is not listen's.
	advertise string
	// natsCluster is the embedded NATS server's route listener; natsRoutes
	// the other nodes' route listeners.
	natsCluster, natsRoutes string
	// natsListen is the embedded server's client listener ("" none: the
	// node connects in-process).
	natsListen string
	// tlsCert, tlsKey and tlsCA secure the embedded server's client port
	// and routes (--nats-tls-*); tlsCA also verifies an external --nats
	// server's certificate.
	tlsCert, tlsKey, tlsCA string
	// replicas of the stream and buckets; zero means 3 with an embedded
	// cluster, else 1.
	replicas int
	// ttl of a membership entry and the heartbeat that refreshes it.
	ttl, heartbeat time.Duration
	// embedded is the clustered NATS server, started once and kept across
	// start attempts (see startMember).
	embedded *embedded
}

type embedded struct {
	mu  sync.Mutex
	srv *jetstream.Server
}

// clusterFlagNames are the flags flags registers, each also set by its
// CAIRN_* variable.
var clusterFlagNames = []string{"cluster", "node-name", "cluster-listen", "cluster-advertise", "nats-cluster", "nats-routes", "nats-listen", "replicas", "member-ttl", "member-heartbeat", "nats-tls-cert", "nats-tls-key", "nats-tls-ca"}

func (c *clusterOptions) flags(fs *flag.FlagSet) {
	c.embedded = &embedded{}
	host, _ := os.Hostname()
	fs.BoolVar(&c.enabled, "cluster", false, "join a Cairn cluster on the shared NATS (implied by --nats-cluster)")
	fs.StringVar(&c.name, "node-name", sanitizeName(host), "this node's name in the cluster (letters, digits, _ and -; stable across restarts)")
	fs.StringVar(&c.listen, "cluster-listen", "127.0.0.1:0", "host:port of this member's actor remote")
	fs.StringVar(&c.advertise, "cluster-advertise", "", "host other members dial, when it differs from --cluster-listen's")
	fs.StringVar(&c.natsCluster, "nats-cluster", "", "host:port: the embedded NATS server joins a NATS cluster, listening for routes here")
	fs.StringVar(&c.natsRoutes, "nats-routes", "", "the other nodes' --nats-cluster addresses, comma-separated")
	fs.StringVar(&c.natsListen, "nats-listen", "", "host:port of the embedded NATS server's client listener (default: none, in-process only)")
	fs.StringVar(&c.tlsCert, "nats-tls-cert", "", "PEM certificate of the embedded NATS server: TLS on its client port and routes (with --nats-tls-key and --nats-tls-ca)")
	fs.StringVar(&c.tlsKey, "nats-tls-key", "", "PEM key of --nats-tls-cert")
	fs.StringVar(&c.tlsCA, "nats-tls-ca", "", "PEM CA that signed every node's --nats-tls-cert (routes verify each other with it); with --nats, the CA of that server's certificate")
	fs.IntVar(&c.replicas, "replicas", 0, "replicas of the run log and buckets: 1, 3 or 5 (default 3 with --nats-cluster, else 1)")
	fs.DurationVar(&c.ttl, "member-ttl", 10*time.Second, "a member that does not refresh its entry for this long is gone; its runs move")
	fs.DurationVar(&c.heartbeat, "member-heartbeat", 0, "how often a member refreshes its entry (default a third of --member-ttl)")
}

// on reports whether this node joins a Cairn cluster.
func (c clusterOptions) on() bool { return c.enabled || c.natsCluster != "" }

func (c clusterOptions) replicaCount() int {
	switch {
	case c.replicas != 0:
		return c.replicas
	case c.natsCluster != "":
		return 3
	}
	return 1
}

// validate names the flag at fault.
func (c clusterOptions) validate(natsURL string) error {
	if c.natsCluster != "" && natsURL != "" {
		return errors.New("--nats-cluster embeds a NATS server; --nats uses an external one: set one of them")
	}
	if c.natsRoutes != "" && c.natsCluster == "" {
		return errors.New("--nats-routes needs --nats-cluster (the embedded server's route listener)")
	}
	if c.tlsCert != "" || c.tlsKey != "" {
		for _, f := range []struct{ flag, v string }{{"--nats-tls-cert", c.tlsCert}, {"--nats-tls-key", c.tlsKey}, {"--nats-tls-ca", c.tlsCA}} {
			if f.v == "" {
				return fmt.Errorf("%s: TLS on the embedded server needs --nats-tls-cert, --nats-tls-key and --nats-tls-ca", f.flag)
			}
		}
	}
	if r := c.replicas; r != 0 && r != 1 && r != 3 && r != 5 {
		return fmt.Errorf("--replicas: %d, want 1, 3 or 5", r)
	}
	for flagName, addr := range map[string]string{"--nats-cluster": c.natsCluster, "--nats-listen": c.natsListen} {
		if addr != "" {
			if _, _, err := hostPort(addr); err != nil {
				return fmt.Errorf("%s: %w", flagName, err)
			}
		}
	}
	if c.natsCluster != "" && strings.Trim(c.natsRoutes, ", ") == "" {
		// nats-server refuses JetStream in a cluster without routes.
		return errors.New("--nats-cluster needs --nats-routes: the other nodes' --nats-cluster addresses, comma-separated")
	}
	if !c.on() {
		return nil
	}
	if err := events.ValidID(c.name); err != nil {
		return fmt.Errorf("--node-name: %q: letters, digits, _ and - only", c.name)
	}
	if _, _, err := hostPort(c.listen); err != nil {
		return fmt.Errorf("--cluster-listen: %w", err)
	}
	if c.ttl < time.Second {
		return fmt.Errorf("--member-ttl: %s, want at least 1s", c.ttl)
	}
	if c.heartbeat < 0 || (c.heartbeat != 0 && c.heartbeat >= c.ttl) {
		return fmt.Errorf("--member-heartbeat: %s, want less than --member-ttl %s", c.heartbeat, c.ttl)
	}
	return nil
}

func hostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q: want host:port", addr)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	return host, port, nil
}

// serverConfig adds the cluster's part to the embedded server's
// configuration: its name, its route listener and routes, its client
// listener.
func (c clusterOptions) serverConfig(base jetstream.ServerConfig) (jetstream.ServerConfig, error) {
	if c.natsListen != "" {
		host, port, err := hostPort(c.natsListen)
		if err != nil {
			return base, fmt.Errorf("--nats-listen: %w", err)
		}
		base.Host, base.Port = host, port
	}
	if c.tlsCert != "" || c.tlsKey != "" {
		for _, f := range []struct{ flag, v string }{{"nats-tls-cert", c.tlsCert}, {"nats-tls-key", c.tlsKey}, {"nats-tls-ca", c.tlsCA}} {
			if f.v == "" {
				return base, fmt.Errorf("--%s: TLS on the embedded server needs --nats-tls-cert, --nats-tls-key and --nats-tls-ca", f.flag)
			}
		}
		base.TLS = &jetstream.TLSConfig{CertFile: c.tlsCert, KeyFile: c.tlsKey, CAFile: c.tlsCA}
	}
	if c.natsCluster == "" {
		return base, nil
	}
	host, port, err := hostPort(c.natsCluster)
	if err != nil {
		return base, fmt.Errorf("--nats-cluster: %w", err)
	}
	var routes []string
	for _, r := range strings.Split(c.natsRoutes, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !strings.Contains(r, "://") {
			r = "nats-route://" + r
		}
		routes = append(routes, r)
	}
	base.ServerName = c.name
	base.Cluster = &jetstream.ClusterConfig{Name: "cairn", Host: host, Port: port, Routes: routes}
	return base, nil
}

// connectEmbedded starts the clustered NATS server once (a start tried
// again reuses it) and connects in-process. The returned close leaves the
// server running: startMember's app shuts it down last. What the node
// needs of the cluster, startAttempt waits for before it starts the app.
func (c clusterOptions) connectEmbedded(scfg jetstream.ServerConfig, o nodeOptions) (*nats.Conn, func(), error) {
	c.embedded.mu.Lock()
	defer c.embedded.mu.Unlock()
	if c.embedded.srv == nil {
		srv, err := jetstream.StartServer(scfg)
		if err != nil {
			return nil, nil, err
		}
		c.embedded.srv = srv
		if o.logger != nil {
			// The client listener is where `node creds` and natscli
			// connect; without --nats-listen it is on loopback on a free
			// port (a clustered server must listen: jetstream.ServerConfig.Port).
			o.logger.Info("embedded NATS server started", "name", c.name, "client", srv.Addr(), "routes_listen", c.natsCluster, "routes", c.natsRoutes)
		}
	}
	nc, err := c.embedded.srv.Connect()
	if err != nil {
		return nil, nil, err
	}
	return nc, nc.Close, nil
}

// bootLock serializes the starts of the nodes: JetStream (2.15.3,
// measured here) answers none of two concurrent creations of one stream
// or bucket before the API timeout, and every node of a new cluster
// creates the same ones at start. The lock is the last message on a
// subject of a small stream (whose own creation is retried), "held NAME"
// or "free NAME", each write fenced on the one before. Its holder renews
// it every bootRenew; a hold older than bootStale is taken over (its
// holder died or hangs), and a node takes a hold in its own name at once
// (an earlier incarnation of this node, killed while it started: a node's
// name is stable across restarts and no two live nodes share one).
func (c clusterOptions) bootLock(ctx context.Context, nc *nats.Conn, logger *slog.Logger, st *starting) (func(), error) {
	js, err := njs.New(nc)
	if err != nil {
		return nil, err
	}
	var stream njs.Stream
	err = st.await(ctx, wait{what: "the boot lock's stream (CAIRN_BOOT)", detail: c.natsDetail, permanent: isDuplicateName}, func(ctx context.Context) error {
		if err := c.routeFault(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		stream, err = js.CreateOrUpdateStream(cctx, njs.StreamConfig{Name: "CAIRN_BOOT", Subjects: []string{"cairn_boot.>"}, Storage: njs.MemoryStorage,
			Replicas: c.replicaCount(), MaxMsgsPerSubject: 1})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("boot lock: stream: %w", err)
	}
	l := &bootLock{js: js, st: stream, name: c.name, now: time.Now, logger: logger}
	if err := l.acquire(ctx, st, c); err != nil {
		return nil, err
	}
	return l.release, nil
}

// Timing of the boot lock: how often its holder renews it, and how old a
// hold is when another node takes it over. A takeover is safe whenever it
// happens (the lock only spares JetStream concurrent creations; a wrong
// one costs an API timeout and a retried start), so clocks that differ by
// a few seconds between nodes (the hold's age compares the server's stamp
// with this node's clock) only make it early or late.
const (
	bootRenew = 2 * time.Second
	bootStale = 8 * time.Second
)

const bootSubject = "cairn_boot.lock"

// bootLock is one node's hold on the boot lock.
type bootLock struct {
	js     njs.JetStream
	st     njs.Stream
	name   string
	now    func() time.Time
	logger *slog.Logger
	// ticks, when set, paces the renewals instead of a bootRenew ticker;
	// renewed, when set, is told of each renewal's outcome (tests).
	ticks   <-chan time.Time
	renewed func(error)

	mu   sync.Mutex
	seq  uint64 // the sequence of this node's last write of the lock
	lost bool   // another node took the lock over
	// heldBy is the lock's last message when a try found it held by
	// another node ("held n2").
	heldBy string
	stop   chan struct{}
	done   chan struct{}
}

// bootFree reports whether a node named name may take the lock whose last
// message is last (nil: never taken) at now: it is free, or held in name's
// own name, or held by another node that has not renewed it for bootStale.
func bootFree(last *njs.RawStreamMsg, name string, now time.Time) bool {
	if last == nil {
		return true
	}
	holder, held := strings.CutPrefix(string(last.Data), "held ")
	return !held || holder == name || now.Sub(last.Time) >= bootStale
}

// try takes the lock if it may (bootFree), fenced on the message it read;
// it reports whether it holds it. Another node taking it at the same
// moment makes it fail (false, nil).
func (l *bootLock) try(ctx context.Context) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	last, err := l.st.GetLastMsgForSubject(cctx, bootSubject)
	if errors.Is(err, njs.ErrMsgNotFound) {
		last, err = nil, nil
	}
	if err != nil {
		return false, fmt.Errorf("boot lock: read: %w", err)
	}
	if !bootFree(last, l.name, l.now()) {
		l.mu.Lock()
		l.heldBy = string(last.Data)
		l.mu.Unlock()
		return false, nil
	}
	var expect uint64
	if last != nil {
		expect = last.Sequence
	}
	ack, err := l.js.Publish(cctx, bootSubject, []byte("held "+l.name), njs.WithExpectLastSequencePerSubject(expect))
	if err != nil {
		var apiErr *njs.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == njs.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == 10164) {
			return false, nil // another node got in first
		}
		return false, fmt.Errorf("boot lock: take: %w", err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	l.mu.Lock()
	l.seq, l.lost, l.stop, l.done = ack.Sequence, false, stop, done
	l.mu.Unlock()
	go l.renew(stop, done)
	return true, nil
}

// errBootHeld: another node holds the boot lock (it is starting).
var errBootHeld = errors.New("boot lock: held by another node, which is starting")

// acquire tries until it holds the lock, for as long as ctx lasts: the
// holder frees it once started, or stops renewing it when it dies.
func (l *bootLock) acquire(ctx context.Context, st *starting, c clusterOptions) error {
	detail := func() []any {
		l.mu.Lock()
		defer l.mu.Unlock()
		return []any{"lock", l.heldBy}
	}
	err := st.await(ctx, wait{what: "the boot lock (the nodes of a cluster start one at a time)", detail: detail, permanent: isDuplicateName,
		pause: func() time.Duration { return time.Duration(50+rand.IntN(100)) * time.Millisecond }},
		func(ctx context.Context) error {
			if err := c.routeFault(); err != nil {
				return err
			}
			ok, err := l.try(ctx)
			if ok {
				return nil
			}
			if err == nil {
				err = errBootHeld
			}
			return err
		})
	if err != nil {
		return fmt.Errorf("boot lock: %w", err)
	}
	return nil
}

// renew writes the hold again every bootRenew, each write fenced on the
// last, until release or until another node took the lock over.
func (l *bootLock) renew(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ticks := l.ticks
	if ticks == nil {
		t := time.NewTicker(bootRenew)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-ticks:
		}
		l.mu.Lock()
		seq := l.seq
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ack, err := l.js.Publish(ctx, bootSubject, []byte("held "+l.name), njs.WithExpectLastSequencePerSubject(seq))
		cancel()
		var apiErr *njs.APIError
		lost := errors.As(err, &apiErr) && (apiErr.ErrorCode == njs.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == 10164)
		l.mu.Lock()
		if err == nil {
			l.seq = ack.Sequence
		}
		l.lost = lost
		l.mu.Unlock()
		if l.renewed != nil {
			l.renewed(err)
		}
		if lost {
			if l.logger != nil {
				l.logger.Warn("boot lock taken over by another node while this one started", "node", l.name)
			}
			return
		}
	}
}

// release stops the renewals and frees the lock, unless another node took
// it over meanwhile (the write is fenced on this node's last).
func (l *bootLock) release() {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop = nil
	l.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-done
	l.mu.Lock()
	seq, lost := l.seq, l.lost
	l.mu.Unlock()
	if lost {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = l.js.Publish(ctx, bootSubject, []byte("free "+l.name), njs.WithExpectLastSequencePerSubject(seq))
}

// embeddedStopWait bounds the embedded server's shutdown when the node
// stops: its process is on its way out.
const embeddedStopWait = 30 * time.Second

func (c clusterOptions) shutdownEmbedded(logger *slog.Logger) {
	if c.embedded == nil {
		return
	}
	c.embedded.mu.Lock()
	defer c.embedded.mu.Unlock()
	if c.embedded.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), embeddedStopWait)
		defer cancel()
		if err := c.embedded.srv.Close(ctx); err != nil && logger != nil {
			logger.Warn("embedded NATS server: close", "err", err)
		}
		c.embedded.srv = nil
	}
}

// startFailures is how many starts a member tries that fail for a reason
// it does not know to be a wait (startWaits): a start that fails anyway
// is tried again on the same embedded server.
const startFailures = 6

// startMember is startApp for a cluster member. With an embedded cluster
// it first waits for what the start needs of the NATS cluster (its
// peers, room for the log's replicas) and takes the boot lock (the nodes
// start one at a time). Whatever the start waits for it waits for as long
// as ctx lasts, telling st; a start that fails on an outage (a quorum
// lost meanwhile, a stream without a leader) is tried again as long as
// the outage lasts, any other failure startFailures times, a refused
// configuration not again.
func startMember(ctx context.Context, o nodeOptions, st *starting) (*app, error) {
	if !o.cluster.on() {
		return startApp(ctx, o)
	}
	if o.cluster.natsCluster != "" {
		// Not a start to try again: the routes have no secret.
		if _, err := routeSecret(); err != nil {
			return nil, err
		}
	}
	a, err := retryStart(ctx, o.logger, st, o.cluster.routeFault, func(attempt int) (*app, error) {
		return o.cluster.startAttempt(ctx, o, st, attempt)
	})
	if err != nil {
		o.cluster.shutdownEmbedded(o.logger)
		return nil, err
	}
	inner := a.close
	a.close = func(ctx context.Context) { inner(ctx); o.cluster.shutdownEmbedded(o.logger) }
	return a, nil
}

// retryStart is startMember's loop: it calls start (attempt 1, 2, ...)
// until it succeeds, a second apart, for as long as ctx lasts and the
// failures are waits (startWaits), startFailures times for other
// failures; a fault of the configuration (fault, checked after each
// failure: a duplicate node name) ends it at once.
func retryStart(ctx context.Context, logger *slog.Logger, st *starting, fault func() error, start func(attempt int) (*app, error)) (*app, error) {
	failures := 0
	for attempt := 1; ; attempt++ {
		a, err := start(attempt)
		if err == nil {
			return a, nil
		}
		if f := fault(); f != nil {
			return nil, f
		}
		if !startWaits(err) {
			failures++
		}
		if ctx.Err() != nil || isDuplicateName(err) || failures == startFailures {
			return nil, err
		}
		if logger != nil {
			logger.Warn("node start failed; trying again", "attempt", attempt, "err", err)
		}
		st.waitingFor("a new start attempt", nil)
		st.failed(err)
		t := st.clock().NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, stoppedWaiting(ctx, "a new start attempt", err)
		case <-t.C():
		}
	}
}

// startAttempt is one try of startMember.
func (c clusterOptions) startAttempt(ctx context.Context, o nodeOptions, st *starting, attempt int) (*app, error) {
	if c.natsCluster != "" {
		// A connection of its own, which the boot lock's renewals use
		// until the app started; the first starts the embedded server.
		nc, closeNATS, _, err := connectWatched(o)
		if err != nil {
			return nil, err
		}
		defer closeNATS()
		if err := c.waitJetStream(ctx, nc, o, st); err != nil {
			return nil, err
		}
		release, err := c.bootLock(ctx, nc, o.logger, st)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	st.waitingFor(fmt.Sprintf("the node's streams, buckets and membership (start attempt %d)", attempt), c.natsDetail)
	defer st.waited()
	return startApp(ctx, o)
}

// startWaits reports whether a start that failed with err waits for
// something to come back: an outage (jetstream.Unavailable: a request
// that timed out, a stream or a cluster without a leader, a lost quorum)
// or a JetStream cluster without the servers to place a stream's
// replicas (10005, no suitable peers: they are down or not joined yet).
// A server that says JetStream is not enabled is no wait, though
// Unavailable counts it: at a start that is a server without JetStream
// (--nats), or one that turned its own off and must restart.
func startWaits(err error) bool {
	var api *njs.APIError
	if errors.Is(err, njs.ErrJetStreamNotEnabled) || errors.Is(err, njs.ErrJetStreamNotEnabledForAccount) ||
		errors.As(err, &api) && (api.ErrorCode == njs.JSErrCodeJetStreamNotEnabled || api.ErrorCode == njs.JSErrCodeJetStreamNotEnabledForAccount) {
		return false
	}
	return jetstream.Unavailable(err) || errors.As(err, &api) && api.ErrorCode == 10005
}

// errDuplicateName: another node's NATS server has this node's name.
var errDuplicateName = errors.New("another node's NATS server has this node's name")

func isDuplicateName(err error) bool { return errors.Is(err, errDuplicateName) }

// routeFault reports what of the embedded server's routes no wait fixes:
// another server of this node's name (its routes are refused, both ways).
func (c clusterOptions) routeFault() error {
	srv := c.server()
	if srv == nil || !srv.Routes().Duplicate {
		return nil
	}
	return fmt.Errorf("--node-name %s: %w: every node needs a name of its own (it names the node's JetStream peer)", c.name, errDuplicateName)
}

// server is the embedded clustered server (nil before it started).
func (c clusterOptions) server() *jetstream.Server {
	if c.embedded == nil {
		return nil
	}
	c.embedded.mu.Lock()
	defer c.embedded.mu.Unlock()
	return c.embedded.srv
}

// routeRefusedRecently is how long after a route was refused for its
// secret a waiting node still says so.
const routeRefusedRecently = 30 * time.Second

// natsDetail is what a node waiting for its NATS cluster tells of it: the
// routes it dials, the servers it has a route to, the replicas the log
// needs (every one of them for a new log, a majority for one that exists),
// and a route refused for its secret.
func (c clusterOptions) natsDetail() []any {
	srv := c.server()
	if srv == nil {
		return nil
	}
	rs := srv.Routes()
	r := c.replicaCount()
	attrs := []any{"routes", c.natsRoutes, "connected", fmt.Sprintf("%d of %d servers %v", len(rs.Peers)+1, r, append([]string{c.name}, rs.Peers...)),
		"replicas", r, "needs", fmt.Sprintf("%d servers with JetStream for a new log, %d for an existing one", r, r/2+1)}
	if !rs.Refused.IsZero() && time.Since(rs.Refused) < routeRefusedRecently {
		attrs = append(attrs, "refused", "a route was refused for its secret: "+routeSecretEnv+" must be the same on every node")
	}
	return attrs
}

// waitJetStream waits until the NATS cluster can serve the log: once the
// log exists, until it answers (its replicas have a leader: a quorum is
// up); in a fresh cluster, until a stream with the log's replicas can be
// placed (no meta leader until a majority of its servers run, and an R3
// stream needs three). A restart must not wait for every peer: with one
// server's JetStream off (a full disk), placing a new R3 stream fails with
// "no suitable peers" while the log itself serves on a quorum. It waits
// for as long as ctx lasts.
func (c clusterOptions) waitJetStream(ctx context.Context, nc *nats.Conn, o nodeOptions, st *starting) error {
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	probe := "CAIRN_PROBE_" + c.name
	return st.await(ctx, wait{what: "the NATS cluster", detail: c.natsDetail, permanent: isDuplicateName}, func(ctx context.Context) error {
		if err := c.routeFault(); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := js.Stream(pctx, events.StreamName(o.stream))
		if errors.Is(err, njs.ErrStreamNotFound) {
			_, err = js.CreateOrUpdateStream(pctx, njs.StreamConfig{Name: probe, Subjects: []string{"cairn_probe." + c.name}, Replicas: c.replicaCount(), Storage: njs.MemoryStorage})
			if err == nil {
				_ = js.DeleteStream(pctx, probe)
			}
		}
		return err
	})
}

// configure makes the node a cluster member: the membership bucket, a KV
// provider per member incarnation, the replicas of the log.
func (c clusterOptions) configure(ctx context.Context, js njs.JetStream, cfg *actors.Config) error {
	cfg.Store.Replicas = c.replicaCount()
	if !c.on() {
		return nil
	}
	var kv njs.KeyValue
	err := jetstream.Setup(ctx, func(ctx context.Context) (err error) {
		kv, err = cluster.Bucket(ctx, js, cluster.BucketConfig{TTL: c.ttl, Replicas: c.replicaCount()})
		return err
	})
	if err != nil {
		return err
	}
	host, port, err := hostPort(c.listen)
	if err != nil {
		return fmt.Errorf("--cluster-listen: %w", err)
	}
	logger := cfg.Logger
	cfg.Cluster = &actors.ClusterConfig{Name: c.name, Host: host, Port: port, AdvertisedHost: c.advertise,
		Provider: func() (pcluster.ClusterProvider, error) {
			return cluster.NewProvider(cluster.Config{KV: kv, TTL: c.ttl, Heartbeat: c.heartbeat, Name: c.name, Logger: logger, Reads: events.SchemaVersion,
				// A node pinned to an earlier level keeps a rollback to an
				// earlier build possible: its runs go in that build's active set too.
				KVActive: actors.EarlierActiveSet || cfg.SchemaLevel > 0 && cfg.SchemaLevel < events.LedgerVersion})
		}}
	// The members' remote uses the node's NATS certificate too: one
	// certificate per node, one CA per cluster.
	if c.tlsCert != "" {
		tc, err := memberTLS(c.tlsCert, c.tlsKey, c.tlsCA)
		if err != nil {
			return err
		}
		cfg.Cluster.TLS = tc
	}
	// A node that dies takes its NATS server with it: a stream leader
	// moves, and attempts fail for a few seconds meanwhile. Retry them for
	// longer before a run is failed.
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 10
	}
	return nil
}

// sanitizeName turns a host name into a node name.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	if b.Len() == 0 {
		return "node"
	}
	return b.String()
}

// memberTLS is the members' remote's mutual TLS from the --nats-tls-*
// files.
func memberTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--nats-tls-cert, --nats-tls-key: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--nats-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--nats-tls-ca: %s holds no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
