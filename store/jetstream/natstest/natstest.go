// Package natstest starts embedded NATS servers for tests: one server, or a
// three-server JetStream cluster, each on loopback with a temporary store
// directory, shut down and waited for in t.Cleanup.
package natstest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream"
)

// Server starts one embedded server with SyncAlways in a temporary directory.
func Server(t testing.TB) *jetstream.Server {
	t.Helper()
	return ServerAt(t, t.TempDir())
}

// ServerAt starts one embedded server on dir (for restart tests).
func ServerAt(t testing.TB, dir string) *jetstream.Server {
	t.Helper()
	s, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// Connect opens an in-process connection closed in t.Cleanup.
func Connect(t testing.TB, s *jetstream.Server) *nats.Conn {
	t.Helper()
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// FreePort returns a loopback TCP port nothing listens on now (a server
// the test starts and restarts on a fixed port takes it). The port is
// below the kernel's ephemeral range, from which every outgoing
// connection and every listener on port 0 takes its port: a port of that
// range, free when picked, was taken by a client's connection before the
// server it was picked for listened on it ("bind: address already in
// use", test/cluster beside stress-ng).
//
// A port is handed out once per process: nothing listens on a port picked
// for a server that has not started yet, so two picks could return the
// same one, and the second server to start found it taken for good (a
// three-node cluster's route port and another node's, test/cluster).
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 1000 {
		port := freeFrom + rand.IntN(low-freeFrom)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		_ = l.Close()
		handedOut.ports[port] = true
		return port
	}
	t.Fatalf("no free loopback port in %d-%d after 1000 tries", freeFrom, low-1)
	return 0
}

// handedOut is every port FreePort returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freeFrom is the least port FreePort picks: above the well-known and most
// registered services' ports.
const freeFrom = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; IANA's 49152 elsewhere).
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > freeFrom+1000 {
				return n
			}
		}
	}
	return 49152
}

// Cluster starts n servers that form one JetStream cluster and waits until
// it can place a replicated stream.
func Cluster(t testing.TB, n int) []*jetstream.Server {
	t.Helper()
	return cluster(t, n, nil)
}

// ClusterTLS is Cluster with TLS on every client port and route.
func ClusterTLS(t testing.TB, n int, tls jetstream.TLSConfig) []*jetstream.Server {
	t.Helper()
	return cluster(t, n, &tls)
}

func cluster(t testing.TB, n int, tls *jetstream.TLSConfig) []*jetstream.Server {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = FreePort(t)
	}
	servers := make([]*jetstream.Server, n)
	for i := range servers {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		s, err := jetstream.StartServer(jetstream.ServerConfig{
			StoreDir: t.TempDir(), ServerName: fmt.Sprintf("s%d", i),
			Cluster: &jetstream.ClusterConfig{Name: "cairn-test", Host: "127.0.0.1", Port: ports[i], Routes: routes},
			TLS:     tls,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		servers[i] = s
	}
	nc := Connect(t, servers[0])
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Wait (bounded) for a meta leader: creating an R3 stream succeeds.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, njs.StreamConfig{Name: "NATSTEST_PROBE", Subjects: []string{"natstest.probe"}, Replicas: n, Storage: njs.MemoryStorage})
		cancel()
		if err == nil {
			_ = js.DeleteStream(context.Background(), "NATSTEST_PROBE")
			return servers
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster of %d not ready: %v", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pull is a JetStream pull request, as a consumer's client sends it.
type Pull struct {
	Expires   time.Duration `json:"expires"`
	Heartbeat time.Duration `json:"idle_heartbeat"`
}

// Pulls subscribes on nc to the pull requests sent to the consumers that
// subject matches ($JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>, wildcards
// allowed) and returns the function that reads the next one, failing the
// test after a minute. Subscribe before the consumer starts.
func Pulls(t testing.TB, nc *nats.Conn, subject string) func() Pull {
	t.Helper()
	ch := make(chan *nats.Msg, 100)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() Pull {
		t.Helper()
		var p Pull
		select {
		case m := <-ch:
			if err := json.Unmarshal(m.Data, &p); err != nil {
				t.Fatalf("pull request %q: %v", m.Data, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no pull request on %s within a minute", subject)
		}
		return p
	}
}
