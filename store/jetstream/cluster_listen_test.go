package jetstream_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// startClustered starts one server of a cluster whose route listeners are
// ports, in the background: a start that never returns fails the test
// instead of hanging it.
func startClustered(t *testing.T, cfg jetstream.ServerConfig) *jetstream.Server {
	t.Helper()
	type started struct {
		s   *jetstream.Server
		err error
	}
	done := make(chan started, 1)
	go func() {
		s, err := jetstream.StartServer(cfg)
		done <- started{s, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("start %s: %v", cfg.ServerName, r.err)
		}
		t.Cleanup(func() { _ = r.s.Close(context.Background()) })
		return r.s
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: StartServer did not return in 2 minutes", cfg.ServerName)
	}
	return nil
}

func routesTo(ports []int, self int) []string {
	var routes []string
	for j, p := range ports {
		if j != self {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
	}
	return routes
}

// Issue 43: a server of a cluster asked not to listen for clients (Port
// -1, what `node serve --nats-cluster` without --nats-listen asks for)
// never opened its route listener (nats-server starts routing once the
// client listener is open), waited 30 s, and its Shutdown then hung for
// good: StartServer never returned. Now it listens on loopback on a free
// port, the three servers route to each other and JetStream places an R3
// stream. Fails before the fix: StartServer does not return.
func TestClusterServerWithoutClientPortRoutes(t *testing.T) {
	ports := []int{natstest.FreePort(t), natstest.FreePort(t), natstest.FreePort(t)}
	servers := make([]*jetstream.Server, len(ports))
	for i := range ports {
		servers[i] = startClustered(t, jetstream.ServerConfig{StoreDir: t.TempDir(), ServerName: fmt.Sprintf("s%d", i), Port: -1,
			Cluster: &jetstream.ClusterConfig{Name: "c", Host: "127.0.0.1", Port: ports[i], Routes: routesTo(ports, i)}})
	}
	for i, s := range servers {
		if addr := s.Addr(); !strings.HasPrefix(addr, "nats://127.0.0.1:") {
			t.Errorf("s%d listens for clients at %q, want loopback", i, addr)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for len(servers[0].Routes().Peers) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("s0 routes to %v after a minute, want s1 and s2", servers[0].Routes().Peers)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := servers[0].Routes(); !slices.Equal(got.Peers, []string{"s1", "s2"}) || got.Duplicate || !got.Refused.IsZero() {
		t.Fatalf("s0's routes: %+v", got)
	}
	js, err := njs.New(natstest.Connect(t, servers[0]))
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, njs.StreamConfig{Name: "R3", Subjects: []string{"r3"}, Replicas: 3, Storage: njs.MemoryStorage})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no R3 stream after a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A route the other server refuses says why (nats-server tells only its
// logger): two servers of one name, and two route secrets that differ.
func TestClusterServerReportsRefusedRoutes(t *testing.T) {
	tests := []struct {
		name    string
		names   [2]string
		secrets [2]string
		refused func(jetstream.RouteState) bool
	}{
		{"one name twice", [2]string{"n1", "n1"}, [2]string{"route-secret-0123456789", "route-secret-0123456789"},
			func(st jetstream.RouteState) bool { return st.Duplicate }},
		{"secrets differ", [2]string{"n1", "n2"}, [2]string{"route-secret-0123456789", "route-secret-9876543210"},
			func(st jetstream.RouteState) bool { return !st.Refused.IsZero() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ports := []int{natstest.FreePort(t), natstest.FreePort(t)}
			var servers []*jetstream.Server
			for i := range ports {
				servers = append(servers, startClustered(t, jetstream.ServerConfig{StoreDir: t.TempDir(), ServerName: tt.names[i], Port: -1,
					Cluster: &jetstream.ClusterConfig{Name: "c", Host: "127.0.0.1", Port: ports[i], Routes: routesTo(ports, i), Secret: tt.secrets[i]}}))
			}
			// Both dial, so both see the other refuse or refuse it.
			deadline := time.Now().Add(time.Minute)
			for !tt.refused(servers[0].Routes()) || !tt.refused(servers[1].Routes()) {
				if time.Now().After(deadline) {
					t.Fatalf("after a minute: %+v and %+v", servers[0].Routes(), servers[1].Routes())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if p := servers[0].Routes().Peers; len(p) != 0 {
				t.Fatalf("routed to %v", p)
			}
		})
	}
}
