package jetstream_test

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// With TLS configured, a cluster forms over TLS routes (mutual: each member
// shows a certificate of the CA), the route port asks every peer for TLS,
// and the client port refuses a client that does not speak it; a client
// with the CA (and credentials) connects.
func TestServerTLS(t *testing.T) {
	files := natstest.TLSFiles(t)
	servers := natstest.ClusterTLS(t, 3, files) // returns once an R3 stream can be placed: the routes work
	srv := servers[0]

	_, err := nats.Connect(srv.Addr(), nats.UserInfo(jetstream.AdminUser, srv.Credentials().Admin), nats.MaxReconnects(0))
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("a client without the CA: %v, want a refusal", err)
	}
	nc, err := nats.Connect(srv.Addr(), nats.UserInfo(jetstream.AdminUser, srv.Credentials().Admin), nats.RootCAs(files.CAFile))
	if err != nil {
		t.Fatalf("a client with the CA: %v", err)
	}
	if !nc.TLSRequired() {
		t.Fatal("the connection is not TLS")
	}
	nc.Close()

	// The client port's first words ask for TLS; the route port says
	// nothing in clear text, and hangs up on a peer that does not start a
	// handshake.
	if !strings.HasPrefix(srv.Addr(), "tls://") {
		t.Fatalf("client URL %s: want tls://", srv.Addr())
	}
	first := func(addr string) (string, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
		return bufio.NewReader(conn).ReadString('\n')
	}
	if info, err := first(strings.TrimPrefix(srv.Addr(), "tls://")); err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("client port INFO: %q, %v", info, err)
	}
	if info, err := first(strings.TrimPrefix(srv.ClusterAddr(), "nats-route://")); err == nil || info != "" {
		t.Fatalf("route port to a clear-text peer: %q, %v; want it closed unspoken", info, err)
	}

	// A missing file is named at start.
	_, err = jetstream.StartServer(jetstream.ServerConfig{StoreDir: t.TempDir(), TLS: &jetstream.TLSConfig{CertFile: files.CertFile, KeyFile: files.KeyFile}})
	if err == nil || !strings.Contains(err.Error(), "TLS needs a certificate, its key and a CA file") {
		t.Fatalf("TLS without a CA: %v", err)
	}
}
