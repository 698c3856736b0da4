package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/store/jetstream"
)

func TestClusterOptionsNameTheFlag(t *testing.T) {
	ok := clusterOptions{name: "n1", listen: "127.0.0.1:0", ttl: 10 * time.Second}
	tests := []struct {
		name    string
		edit    func(c *clusterOptions)
		natsURL string
		want    string // the flag the error names; "" for no error
	}{
		{"off", func(c *clusterOptions) {}, "", ""},
		{"embedded cluster", func(c *clusterOptions) { c.natsCluster = "127.0.0.1:6222"; c.natsRoutes = "127.0.0.1:6223" }, "", ""},
		{"embedded and external", func(c *clusterOptions) { c.natsCluster = "127.0.0.1:6222" }, "nats://x:4222", "--nats-cluster"},
		{"routes without a listener", func(c *clusterOptions) { c.natsRoutes = "127.0.0.1:6223" }, "", "--nats-routes"},
		{"bad replicas", func(c *clusterOptions) { c.replicas = 2 }, "", "--replicas"},
		{"bad route listener", func(c *clusterOptions) { c.natsCluster = "6222" }, "", "--nats-cluster"},
		{"bad client listener", func(c *clusterOptions) { c.natsListen = "localhost" }, "", "--nats-listen"},
		{"bad name", func(c *clusterOptions) { c.enabled, c.name = true, "n.1" }, "", "--node-name"},
		{"bad remote address", func(c *clusterOptions) { c.enabled, c.listen = true, "nowhere" }, "", "--cluster-listen"},
		{"short TTL", func(c *clusterOptions) { c.enabled, c.ttl = true, 100*time.Millisecond }, "", "--member-ttl"},
		{"heartbeat not below TTL", func(c *clusterOptions) { c.enabled, c.heartbeat = true, 10*time.Second }, "", "--member-heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			err := c.validate(tt.natsURL)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestClusterServerConfig(t *testing.T) {
	c := clusterOptions{name: "n1", natsCluster: "127.0.0.1:6222", natsRoutes: "127.0.0.1:6223, nats-route://127.0.0.1:6224", natsListen: "127.0.0.1:4222"}
	got, err := c.serverConfig(jetstream.ServerConfig{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got.ServerName != "n1" || got.Host != "127.0.0.1" || got.Port != 4222 || got.Cluster == nil || got.Cluster.Port != 6222 ||
		strings.Join(got.Cluster.Routes, " ") != "nats-route://127.0.0.1:6223 nats-route://127.0.0.1:6224" {
		t.Fatalf("server config %+v, cluster %+v", got, got.Cluster)
	}
	if c.replicaCount() != 3 || (clusterOptions{}).replicaCount() != 1 || (clusterOptions{replicas: 5}).replicaCount() != 5 {
		t.Fatal("replica defaults")
	}
}
