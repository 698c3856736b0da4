package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
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
		{"a listener without routes", func(c *clusterOptions) { c.natsCluster = "127.0.0.1:6222" }, "", "--nats-routes"},
		{"TLS without its key", func(c *clusterOptions) { c.tlsCert, c.tlsCA = "cert.pem", "ca.pem" }, "", "--nats-tls-key"},
		{"TLS without its CA", func(c *clusterOptions) { c.tlsCert, c.tlsKey = "cert.pem", "key.pem" }, "", "--nats-tls-ca"},
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

	// --nats-tls-*: the server's client port and routes, and the members'
	// remote, from the same files.
	files := natstest.TLSFiles(t)
	c.tlsCert, c.tlsKey, c.tlsCA = files.CertFile, files.KeyFile, files.CAFile
	got, err = c.serverConfig(jetstream.ServerConfig{StoreDir: t.TempDir(), Port: -1})
	if err != nil || got.TLS == nil || *got.TLS != files {
		t.Fatalf("TLS: %+v, %v", got.TLS, err)
	}
	if tc, err := memberTLS(files.CertFile, files.KeyFile, files.CAFile); err != nil || len(tc.Certificates) != 1 || tc.RootCAs == nil {
		t.Fatalf("member TLS: %v", err)
	}
	if _, err := memberTLS(files.CertFile, files.KeyFile, files.CertFile+".missing"); err == nil || !strings.Contains(err.Error(), "--nats-tls-ca") {
		t.Fatalf("a missing CA: %v", err)
	}
	if _, err := memberTLS(files.KeyFile, files.KeyFile, files.CAFile); err == nil || !strings.Contains(err.Error(), "--nats-tls-cert") {
		t.Fatalf("a key for a certificate: %v", err)
	}
}

// Issue 22: a failed start, or a node killed while starting, left the boot
// lock held for 2 minutes, and restarts took 1.5-2 min. Now the holder
// renews it every bootRenew, another node takes over a hold bootStale old
// (each node's clock is injected: no sleeps), a node takes a hold in its
// own name at once, and a holder that lost the lock frees nothing.
func TestBootLock(t *testing.T) {
	ctx := context.Background()
	nc := natstest.Connect(t, natstest.Server(t))
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.CreateOrUpdateStream(ctx, njs.StreamConfig{Name: "CAIRN_BOOT", Subjects: []string{"cairn_boot.>"}, Storage: njs.MemoryStorage, MaxMsgsPerSubject: 1})
	if err != nil {
		t.Fatal(err)
	}
	lock := func(name string, ahead time.Duration) (*bootLock, chan time.Time, chan error) {
		ticks, renewed := make(chan time.Time), make(chan error, 1)
		return &bootLock{js: js, st: st, name: name, now: func() time.Time { return time.Now().Add(ahead) },
			ticks: ticks, renewed: func(err error) { renewed <- err }}, ticks, renewed
	}
	last := func() string {
		m, err := st.GetLastMsgForSubject(ctx, bootSubject)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s@%d", m.Data, m.Sequence)
	}
	try := func(l *bootLock, want bool) {
		t.Helper()
		got, err := l.try(ctx)
		if err != nil || got != want {
			t.Fatalf("%s takes the lock (last %s): %v, %v; want %v", l.name, last(), got, err, want)
		}
	}

	a, aTicks, aRenewed := lock("n1", 0)
	try(a, true)
	b, _, _ := lock("n2", 0)
	try(b, false) // held, fresh

	before := last()
	aTicks <- time.Now()
	if err := <-aRenewed; err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if after := last(); after == before || !strings.HasPrefix(after, "held n1@") {
		t.Fatalf("after a renewal the lock is %s (was %s); want held n1 again, written anew", after, before)
	}

	// n2's clock is past the hold's staleness: n1 stopped renewing (killed, or paused).
	b.now = func() time.Time { return time.Now().Add(bootStale + time.Second) }
	try(b, true)
	aTicks <- time.Now()
	if err := <-aRenewed; err == nil {
		t.Fatal("n1 renewed a lock n2 took over")
	}
	a.release() // must not free n2's hold
	if got := last(); !strings.HasPrefix(got, "held n2@") {
		t.Fatalf("after n1, which lost the lock, released it: %s; want held n2", got)
	}

	// n2 is killed while it starts (no release); its next incarnation
	// takes the hold in its own name at once, and frees it when started.
	b2, _, _ := lock("n2", 0)
	try(b2, true)
	// The killed incarnation's renewals ended with its process (here: its
	// release, whose write, fenced on its own last, frees nothing).
	b.release()
	if got := last(); !strings.HasPrefix(got, "held n2@") {
		t.Fatalf("after the killed incarnation's release: %s; want held n2 (the new one's)", got)
	}
	c, _, _ := lock("n3", 0)
	try(c, false)
	b2.release()
	if got := last(); !strings.HasPrefix(got, "free n2@") {
		t.Fatalf("after a release: %s; want free n2", got)
	}
	try(c, true)
	c.release()

	// The decision alone, on the lock's own timestamps.
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		last *njs.RawStreamMsg
		now  time.Time
		want bool
	}{
		{"never taken", nil, at, true},
		{"free", &njs.RawStreamMsg{Data: []byte("free n1"), Time: at}, at, true},
		{"held by another, fresh", &njs.RawStreamMsg{Data: []byte("held n1"), Time: at}, at.Add(bootStale - time.Millisecond), false},
		{"held by another, stale", &njs.RawStreamMsg{Data: []byte("held n1"), Time: at}, at.Add(bootStale), true},
		{"held in its own name", &njs.RawStreamMsg{Data: []byte("held n2"), Time: at}, at, true},
	} {
		if got := bootFree(tc.last, "n2", tc.now); got != tc.want {
			t.Errorf("%s: bootFree = %v, want %v", tc.name, got, tc.want)
		}
	}
}
