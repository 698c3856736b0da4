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
	// release frees the boot lock a start attempt holds; nil when none.
	release func()
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

// connectEmbedded starts the clustered NATS server once (a retried start
// reuses it), connects in-process and waits until JetStream can place the
// log. The returned close leaves the server running: startMember's app
// shuts it down last.
func (c clusterOptions) connectEmbedded(scfg jetstream.ServerConfig, o nodeOptions) (*nats.Conn, func(), error) {
	c.embedded.mu.Lock()
	defer c.embedded.mu.Unlock()
	if c.embedded.srv == nil {
		srv, err := jetstream.StartServer(scfg)
		if err != nil {
			return nil, nil, err
		}
		c.embedded.srv = srv
	}
	nc, err := c.embedded.srv.Connect()
	if err != nil {
		return nil, nil, err
	}
	if err := c.waitJetStream(context.Background(), nc, o); err != nil {
		nc.Close()
		return nil, nil, err
	}
	release, err := c.bootLock(context.Background(), nc, o.logger)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	c.embedded.release = release
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
func (c clusterOptions) bootLock(ctx context.Context, nc *nats.Conn, logger *slog.Logger) (func(), error) {
	js, err := njs.New(nc)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	var st njs.Stream
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err = js.CreateOrUpdateStream(cctx, njs.StreamConfig{Name: "CAIRN_BOOT", Subjects: []string{"cairn_boot.>"}, Storage: njs.MemoryStorage,
			Replicas: c.replicaCount(), MaxMsgsPerSubject: 1})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("boot lock: stream: %w", err)
		}
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
	}
	l := &bootLock{js: js, st: st, name: c.name, now: time.Now, logger: logger}
	if err := l.acquire(ctx, deadline); err != nil {
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
	stop chan struct{}
	done chan struct{}
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

// acquire tries until it holds the lock, or until deadline.
func (l *bootLock) acquire(ctx context.Context, deadline time.Time) error {
	for {
		ok, err := l.try(ctx)
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("boot lock: not acquired in 5 minutes: %v", err)
		}
		time.Sleep(time.Duration(50+rand.IntN(100)) * time.Millisecond)
	}
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

func (c clusterOptions) releaseBoot() {
	c.embedded.mu.Lock()
	release := c.embedded.release
	c.embedded.release = nil
	c.embedded.mu.Unlock()
	if release != nil {
		release()
	}
}

func (c clusterOptions) shutdownEmbedded() {
	if c.embedded == nil {
		return
	}
	c.embedded.mu.Lock()
	defer c.embedded.mu.Unlock()
	if c.embedded.srv != nil {
		_ = c.embedded.srv.Close(context.Background())
		c.embedded.srv = nil
	}
}

// startMember is startApp for a cluster member: the nodes start one at a
// time (bootLock), and a start that failed anyway is tried again on the
// same embedded server.
func startMember(ctx context.Context, o nodeOptions) (*app, error) {
	if !o.cluster.on() {
		return startApp(ctx, o)
	}
	if o.cluster.natsCluster != "" {
		// Not a start to try again: the routes have no secret.
		if _, err := routeSecret(); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		a, err := startApp(ctx, o)
		o.cluster.releaseBoot()
		if err == nil {
			inner := a.close
			a.close = func(ctx context.Context) { inner(ctx); o.cluster.shutdownEmbedded() }
			return a, nil
		}
		if attempt == 6 || ctx.Err() != nil {
			o.cluster.shutdownEmbedded()
			return nil, err
		}
		if o.logger != nil {
			o.logger.Warn("node start failed; trying again", "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// waitJetStream waits until the NATS cluster can serve the log: once the
// log exists, until it answers (its replicas have a leader: a quorum is
// up); in a fresh cluster, until a stream with the log's replicas can be
// placed (no meta leader until a majority of its servers run, and an R3
// stream needs three). A restart must not wait for every peer: with one
// server's JetStream off (a full disk), placing a new R3 stream fails with
// "no suitable peers" while the log itself serves on a quorum.
func (c clusterOptions) waitJetStream(ctx context.Context, nc *nats.Conn, o nodeOptions) error {
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	probe := "CAIRN_PROBE_" + c.name
	deadline := time.Now().Add(5 * time.Minute)
	var logged time.Time
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.Stream(pctx, events.StreamName(o.stream))
		if errors.Is(err, njs.ErrStreamNotFound) {
			_, err = js.CreateOrUpdateStream(pctx, njs.StreamConfig{Name: probe, Subjects: []string{"cairn_probe." + c.name}, Replicas: c.replicaCount(), Storage: njs.MemoryStorage})
			if err == nil {
				_ = js.DeleteStream(pctx, probe)
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nats cluster: no room for %d replicas: %w", c.replicaCount(), err)
		}
		if o.logger != nil && time.Since(logged) > 5*time.Second {
			o.logger.Info("waiting for the NATS cluster", "replicas", c.replicaCount(), "err", err)
			logged = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
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
				KVActive: actors.EarlierActiveSet || cfg.SchemaLevel > 0 && cfg.SchemaLevel < events.SchemaVersion})
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
