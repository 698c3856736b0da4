package jetstream

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	// StoreDir is where JetStream keeps its files; required.
	StoreDir string
	// Host to listen on; "" means 127.0.0.1 (loopback only). Exposing the
	// server beyond loopback is the operator's decision and needs
	// authentication, which this helper does not configure.
	Host string
	// Port to listen on; 0 picks a free port, -1 does not listen at all
	// (in-process connections only).
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
}

// ClusterConfig is the cluster part of an embedded server's configuration.
type ClusterConfig struct {
	Name string
	Host string
	Port int
	// Routes are the other members' cluster URLs (nats-route://host:port).
	Routes []string
}

// Server is an embedded NATS server.
type Server struct {
	srv *server.Server
}

// StartServer starts an embedded NATS server with JetStream and waits until
// it accepts connections.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("jetstream: server: StoreDir is required")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
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
	}
	switch cfg.Port {
	case 0:
		opts.Port = server.RANDOM_PORT
	case -1:
		opts.DontListen = true
	}
	if c := cfg.Cluster; c != nil {
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("jetstream: server: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("jetstream: server: not ready for connections after 30s")
	}
	return &Server{srv: srv}, nil
}

// Connect opens an in-process client connection (no socket).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.srv), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect in-process: %w", err)
	}
	return nc, nil
}

// ClientURL is the server's client URL ("" when it does not listen).
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// ClusterAddr is the server's cluster listener, for other members' routes.
func (s *Server) ClusterAddr() string {
	if a := s.srv.ClusterAddr(); a != nil {
		return "nats-route://" + a.String()
	}
	return ""
}

// JetStreamReady reports whether JetStream is enabled and, in a cluster,
// has a meta leader.
func (s *Server) JetStreamReady() bool {
	return s.srv.JetStreamEnabled() && (s.srv.JetStreamIsClustered() == false || s.srv.JetStreamIsLeader() || s.srv.JetStreamIsCurrent())
}

// Shutdown stops the server and waits until it has stopped, so its store
// directory may be removed or reopened.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}
