package jetstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/cairn-agents/cairn/events"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	// StoreDir is where JetStream keeps its files; required.
	StoreDir string
	// Host to listen on; "" means 127.0.0.1 (loopback only). Exposing the
	// server beyond loopback is the operator's decision; its clients
	// authenticate in any case (Credentials), in clear text unless TLS is
	// set.
	Host string
	// Port to listen on; 0 picks a free port, -1 does not listen at all
	// (in-process connections only), except with Cluster: there -1
	// listens on 127.0.0.1 on a free port, whatever Host says (routes
	// start only once a client listener is open).
	Port int
	// NoSync turns off SyncAlways. With SyncAlways (the default) the server
	// fsyncs every write before acknowledging it, so an acknowledged commit
	// survives power loss. Without it the server syncs every two minutes:
	// 10-25x the throughput here, but acknowledged writes can be lost.
	NoSync bool
	// ServerName names the server; required in a cluster.
	ServerName string
	// Cluster, when set, joins a NATS cluster (for R3 streams).
	Cluster *ClusterConfig
	// Credentials of the server's users (AdminUser, ReaderUser): no client
	// connects without one of them, in-process or on the client port.
	// Nil means credentials generated once per process and kept in memory
	// only (tests, an in-process server): Connect and ClientURL carry
	// them. A server others connect to is given the ones of its data
	// directory (LoadOrCreateCredentials).
	Credentials *Credentials
	// TLS, when set, secures the client port (a client must speak TLS;
	// in-process connections need none) and the cluster's routes (mutual
	// TLS: each member presents its certificate, verified against CAFile,
	// and checks the other's against the route's host). Nil means clear
	// text on both.
	TLS *TLSConfig
	// Stream is the run log's stream, the one ReaderUser may read; ""
	// means events.DefaultStream (as Config.Stream).
	Stream string
	// WriteFaults, when set, records the write errors of the server's
	// stream stores (a full disk, an I/O error) the moment the server
	// reports them: it answers the publish that met one with nothing, and
	// its publisher learns of it only when its request times out. Give
	// the node's Store the same one (Config.WriteFaults).
	WriteFaults *WriteFaults
}

// TLSConfig names PEM files: the server's certificate (valid for the hosts
// clients and other members reach it by), its key, and the CA that signed
// the members' certificates.
type TLSConfig struct {
	CertFile, KeyFile, CAFile string
}

// tlsTimeout is how long a TLS handshake may take, in seconds: the
// server's default (0.5 s) fails handshakes on a busy machine.
const tlsTimeout = 5

// ClusterConfig is the cluster part of an embedded server's configuration.
type ClusterConfig struct {
	Name string
	Host string
	Port int
	// Routes are the other members' cluster URLs (nats-route://host:port).
	Routes []string
	// Secret authenticates the routes (user RouteUser, this password,
	// both ways); the same on every member, at least MinRouteSecret
	// bytes. Empty means a secret generated once per process: only
	// servers of this process can then join each other (tests).
	Secret string
}

// Server is an embedded NATS server.
type Server struct {
	srv   *server.Server
	creds *Credentials
	lock  *dirLock
	log   *fatalLog
}

// StartServer starts an embedded NATS server with JetStream and waits until
// it accepts connections. A store directory it cannot write (read-only, a
// path through a file) is refused at once, naming the directory; so is
// anything else that keeps JetStream from starting, with the server's own
// reason. The server holds its store directory locked until Close: a second
// server on it, in this process or another, is refused with an error
// matching ErrStoreInUse that names the holder.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("jetstream: server: StoreDir is required")
	}
	if err := writable(cfg.StoreDir); err != nil {
		return nil, err
	}
	lock, err := lockDir(cfg.StoreDir)
	if err != nil {
		return nil, err
	}
	s, err := startServer(cfg)
	if err != nil {
		if !errors.Is(err, errStillStopping) {
			_ = lock.release()
		}
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// startServer starts the server of StartServer, whose store directory is
// writable and locked.
func startServer(cfg ServerConfig) (*Server, error) {
	if cfg.Stream != "" {
		if err := events.CheckStreamName(cfg.Stream); err != nil {
			return nil, fmt.Errorf("jetstream: ServerConfig.Stream: %w", err)
		}
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	creds, routeSecret, err := ephemeralAuth()
	if err != nil {
		return nil, err
	}
	if cfg.Credentials != nil {
		if err := cfg.Credentials.validate(); err != nil {
			return nil, fmt.Errorf("jetstream: server: credentials: %w", err)
		}
		creds = cfg.Credentials
	}
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		SyncAlways: !cfg.NoSync,
		NoLog:      true,
		NoSigs:     true,
		Users:      users(creds, events.StreamName(cfg.Stream)),
		// Without a limit of its own the server takes 75% of the disk's
		// free space at its start as its storage limit, for its whole
		// life: a node restarted while its disk was full refused every
		// write as "insufficient resources" after the space came back, and
		// was never ready again. The file system's size is the limit
		// instead: a full disk is a write error (the node exits and is
		// restarted), and the space that returns is used.
		JetStreamMaxStore: fileSystemSize(cfg.StoreDir),
	}
	if t := cfg.TLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" {
			return nil, errors.New("jetstream: server: TLS needs a certificate, its key and a CA file")
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.CertFile, KeyFile: t.KeyFile, CaFile: t.CAFile})
		if err != nil {
			return nil, fmt.Errorf("jetstream: server: TLS: %w", err)
		}
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, tc, tlsTimeout
	}
	implicit := cfg.Port == -1 && cfg.Cluster != nil
	switch {
	case implicit:
		// A server with a cluster listens for clients even when asked
		// not to: nats-server (2.15.3, Server.Start) opens its route
		// listener and dials its routes only once the client accept
		// loop has opened the client listener, and a server that does
		// not listen (DontListen) runs no accept loop. Such a server
		// never routes: it waited 30 s for its route listener, was
		// refused as not ready, and its Shutdown then waited forever
		// for the routing goroutine (issue 43: the documented cluster
		// hung without a word). The listener is on loopback, where only
		// this machine's processes reach it, and admits no client
		// without the server's credentials, as every listener here.
		opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	case cfg.Port == 0:
		opts.Port = server.RANDOM_PORT
	case cfg.Port == -1:
		opts.DontListen = true
	}
	if c := cfg.Cluster; c != nil {
		if c.Secret != "" {
			if len(c.Secret) < MinRouteSecret {
				return nil, fmt.Errorf("jetstream: server: cluster secret: %d bytes, want at least %d", len(c.Secret), MinRouteSecret)
			}
			routeSecret = c.Secret
		}
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port, Username: RouteUser, Password: routeSecret,
			// The client listener no one asked for is not told to the
			// other servers, which would hand it to their clients as a
			// server to reconnect to (a port on another machine's
			// loopback).
			NoAdvertise: implicit}
		if t := cfg.TLS; t != nil {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.CertFile, KeyFile: t.KeyFile, CaFile: t.CAFile, Verify: true})
			if err != nil {
				return nil, fmt.Errorf("jetstream: server: route TLS: %w", err)
			}
			// A member dials routes too: it checks the other's
			// certificate against the same CA (nats-server's config
			// file parser does this; its Go options do not).
			tc.RootCAs = tc.ClientCAs
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, tlsTimeout
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				// The error names the route; the URL may carry a secret.
				return nil, fmt.Errorf("jetstream: server: route %q: not a URL", redactURL(r))
			}
			u.User = url.UserPassword(RouteUser, routeSecret)
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: server: %w", err)
	}
	// The server reports what stops it from starting (JetStream that
	// cannot open its store, a port in use) only to its logger, and then
	// never accepts a connection: without one, a start failed as a 30 s
	// wait and no reason.
	fatal := &fatalLog{faults: cfg.WriteFaults}
	srv.SetLoggerV2(fatal, false, false, false)
	srv.Start() // does not block
	if err := fatal.err(); err != nil {
		return nil, stopFailed(srv, fmt.Errorf("jetstream: server (store %s): %w", cfg.StoreDir, err))
	}
	if !srv.ReadyForConnections(30 * time.Second) {
		if err := fatal.err(); err != nil {
			return nil, stopFailed(srv, fmt.Errorf("jetstream: server (store %s): %w", cfg.StoreDir, err))
		}
		return nil, stopFailed(srv, errors.New("jetstream: server: not ready for connections after 30s"))
	}
	if !srv.JetStreamEnabled() {
		return nil, stopFailed(srv, fmt.Errorf("jetstream: server (store %s): JetStream did not start", cfg.StoreDir))
	}
	return &Server{srv: srv, creds: creds, log: fatal}, nil
}

// failedStopWait bounds the shutdown of a server that failed to start.
const failedStopWait = 10 * time.Second

// errStillStopping: a server that failed to start did not stop within
// failedStopWait.
var errStillStopping = errors.New("jetstream: server: still stopping")

// stopFailed stops a server that failed to start (for the reason err) and
// returns err; wrapped with errStillStopping when the server did not stop
// within failedStopWait. nats-server's Shutdown waits for every goroutine
// the server started, and one of them may wait for something that never
// comes (a routing goroutine waits for a client listener that never
// opens): a failed start must not hang its caller for that. A server that
// did not stop may still write its store, whose lock then stays held.
func stopFailed(srv *server.Server, err error) error {
	done := make(chan struct{})
	go func() {
		srv.Shutdown()
		close(done)
	}()
	t := time.NewTimer(failedStopWait)
	defer t.Stop()
	select {
	case <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w (%w after %s: its store stays locked until this process exits)", err, errStillStopping, failedStopWait)
	}
}

// redactURL is r without the password of its user information.
func redactURL(r string) string {
	if u, err := url.Parse(r); err == nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(r, "@"); at >= 0 {
		return "***" + r[at:]
	}
	return r
}

// writable makes sure dir exists and a file can be created in it: a
// server whose JetStream cannot write its store directory does not start.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("jetstream: server: store directory %s cannot be created: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".cairn-write-check-*")
	if err != nil {
		return fmt.Errorf("jetstream: server: store directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	err = f.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("jetstream: server: store directory %s: %w", dir, err)
	}
	return nil
}

// fatalLog is the embedded server's logger: silent, but it keeps the
// first fatal error the server reports (it does not exit on it, as the
// server's own logger would), what it reports of refused routes, which it
// tells no one else, and the write errors of its streams' stores
// (faults).
type fatalLog struct {
	faults *WriteFaults
	mu     sync.Mutex
	first  string
	// duplicate: a server with this one's name routed to it.
	duplicate bool
	// refused is when a route was last refused for its secret.
	refused time.Time
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == "" {
		l.first = fmt.Sprintf(format, v...)
	}
}

func (l *fatalLog) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == "" {
		return nil
	}
	return errors.New(l.first)
}

// Errorf keeps the refused routes. nats-server (2.15.3, route.go) reports
// them only as these two lines, each prefixed with the connection: the
// server that accepts a route from a server of its own name, and the
// server whose route the other refused for its credentials.
// TestClusterServerReportsRefusedRoutes holds the formats. It records a
// stream store's write error in faults: the server (2.15.3, stream.go
// setWriteErrLocked) reports it once per stream, as the line below with
// the account, the stream and the error, when the store first fails a
// write; it answers the publish nothing. TestServerReportsAFullDisk holds
// the format.
func (l *fatalLog) Errorf(format string, v ...any) {
	switch {
	case format == "JetStream stream '%s > %s' critical write error: %v" && len(v) == 3:
		stream, _ := v[1].(string)
		err, _ := v[2].(error)
		if stream != "" && err != nil {
			l.faults.failed(stream, err)
		}
	case strings.HasSuffix(format, "Remote server has a duplicate name: %q"):
		l.mu.Lock()
		l.duplicate = true
		l.mu.Unlock()
	case strings.HasSuffix(format, "Route Error %s") && strings.Contains(fmt.Sprint(v...), "Authorization Violation"):
		l.mu.Lock()
		l.refused = time.Now()
		l.mu.Unlock()
	}
}

func (*fatalLog) Noticef(string, ...any) {}
func (*fatalLog) Warnf(string, ...any)   {}
func (*fatalLog) Debugf(string, ...any)  {}
func (*fatalLog) Tracef(string, ...any)  {}

// Connect opens an in-process client connection (no socket), as
// AdminUser. Its reply subjects are not under _INBOX.> (where ReaderUser
// may subscribe).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.srv), nats.MaxReconnects(-1),
		nats.UserInfo(AdminUser, s.creds.Admin), nats.CustomInboxPrefix(nodeInbox)}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect in-process: %w", err)
	}
	return nc, nil
}

// ClientURL is the server's client URL ("" when it does not listen) with
// AdminUser's credentials in it: a secret, not for logs (Addr has none).
func (s *Server) ClientURL() string {
	raw := s.Addr()
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.User = url.UserPassword(AdminUser, s.creds.Admin)
	return u.String()
}

// Addr is the server's client URL without credentials ("" when it does
// not listen).
func (s *Server) Addr() string {
	if s.srv.Addr() == nil {
		return ""
	}
	return s.srv.ClientURL()
}

// Credentials are the passwords of the server's users.
func (s *Server) Credentials() Credentials { return *s.creds }

// ClusterAddr is the server's cluster listener, for other members' routes.
func (s *Server) ClusterAddr() string {
	if a := s.srv.ClusterAddr(); a != nil {
		return "nats-route://" + a.String()
	}
	return ""
}

// RouteState is what a server knows of its routes.
type RouteState struct {
	// Peers are the names of the servers this one has a route to, sorted.
	Peers []string
	// Duplicate: a server of this one's name routed to it. The route was
	// refused, and will be every time: JetStream tells servers apart by
	// their names.
	Duplicate bool
	// Refused is when a route was last refused for its secret (the two
	// servers' route secrets differ); zero when never.
	Refused time.Time
}

// Routes reports the server's routes (nothing without a cluster).
func (s *Server) Routes() RouteState {
	var st RouteState
	if rz, err := s.srv.Routez(&server.RoutezOptions{}); err == nil {
		seen := map[string]bool{}
		for _, r := range rz.Routes {
			// A pool opens several routes to one server.
			if r.RemoteName != "" && !seen[r.RemoteName] {
				seen[r.RemoteName] = true
				st.Peers = append(st.Peers, r.RemoteName)
			}
		}
		slices.Sort(st.Peers)
	}
	s.log.mu.Lock()
	st.Duplicate, st.Refused = s.log.duplicate, s.log.refused
	s.log.mu.Unlock()
	return st
}

// JetStreamReady reports whether JetStream is enabled and, in a cluster,
// has a meta leader.
func (s *Server) JetStreamReady() bool {
	return s.srv.JetStreamEnabled() && (s.srv.JetStreamIsClustered() == false || s.srv.JetStreamIsLeader() || s.srv.JetStreamIsCurrent())
}

// ErrStoreFailed: the embedded server's JetStream can no longer store, and
// will not until the server restarts.
var ErrStoreFailed = errors.New("jetstream: server: JetStream cannot store")

// Healthy reports what keeps the server's JetStream from storing for good
// (ErrStoreFailed), nil when nothing does. Two states last until the
// server restarts, whatever the disk does meanwhile (nats-server 2.15):
// JetStream turned off, which the server does when its disk is out of
// space in a cluster (handleOutOfSpace) or denies it a write
// (ShutdownJetStream; it turns JetStream on again only on a configuration
// reload); and, on a single server, a stream whose store met a write
// error (a full disk): the file store keeps the error and fails every
// later write, answering the publisher nothing. A passing state (no meta
// leader yet in a cluster) is not reported.
func (s *Server) Healthy() error {
	if !s.srv.JetStreamEnabled() {
		return fmt.Errorf("%w: JetStream is turned off", ErrStoreFailed)
	}
	if s.srv.JetStreamIsClustered() {
		return nil
	}
	h := s.srv.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		if e.Type == server.HealthzErrorStream {
			return fmt.Errorf("%w: %s", ErrStoreFailed, e.Error)
		}
	}
	return nil
}

// Close stops the server and waits until it has stopped, so its store
// directory may be removed or reopened; or until ctx is done, then it
// returns ctx's error while the server goes on stopping. A second Close
// waits the same way.
func (s *Server) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		close(done)
	}()
	select {
	case <-done:
		// The store is the next server's only once this one stopped.
		return s.lock.release()
	case <-ctx.Done():
		return fmt.Errorf("jetstream: server: still stopping: %w", ctx.Err())
	}
}
