package leakcheck_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/internal/leakcheck"
)

// A goroutine started by Cairn's code and still blocked is found, with its
// stack; once it ends, Wait finds none.
func TestFindsAGoroutineOfCairnsOwn(t *testing.T) {
	if leaks := leakcheck.Wait(10 * time.Second); len(leaks) != 0 {
		t.Fatalf("leaks before the test: %q", leaks)
	}
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go parked(started, stop, done)
	<-started // in parked: a goroutine not yet started has no frame of it (seen under stress-ng)
	leaks := leakcheck.Find()
	if len(leaks) != 1 || !strings.Contains(leaks[0], "leakcheck_test.parked") {
		t.Fatalf("Find = %q; want the parked goroutine", leaks)
	}
	close(stop)
	<-done
	if leaks := leakcheck.Wait(10 * time.Second); len(leaks) != 0 {
		t.Fatalf("Wait after the goroutine ended = %q; want none", leaks)
	}
}

func parked(started, stop, done chan struct{}) {
	defer close(done)
	close(started)
	<-stop
}

// A goroutine neither running nor started by a watched module (a library's
// own, as protoactor-go leaves behind) is not a leak; one started by a
// watched module is, even when its frames are all elsewhere.
func TestWatched(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack string
		want  bool
	}{
		{"library's own", `goroutine 7 [chan receive]:
github.com/asynkron/protoactor-go/actor.(*guardiansValue).loop(0xc0000a)
	/go/pkg/mod/github.com/asynkron/protoactor-go@v0.0.0/actor/guardian.go:40 +0x2e
created by github.com/asynkron/protoactor-go/actor.NewActorSystem in goroutine 1
	/go/pkg/mod/github.com/asynkron/protoactor-go@v0.0.0/actor/actor_system.go:80 +0x1a`, false},
		{"library's own, a file under a watched path", `goroutine 8 [select]:
google.golang.org/grpc.(*ccBalancerWrapper).watcher(0xc0001)
	/src/github.com/cairn-agents/cairn/vendor/grpc/balancer.go:10 +0x1
created by google.golang.org/grpc.newCCBalancerWrapper in goroutine 1
	/src/grpc/balancer.go:5 +0x1`, false},
		{"runs Cairn's code", `goroutine 9 [select]:
github.com/cairn-agents/cairn/actors.(*completions).upkeep(0xc0002)
	/src/actors/completions.go:128 +0x1
created by github.com/cairn-agents/cairn/actors.(*Node).openCompletions in goroutine 1
	/src/actors/completions.go:90 +0x1`, true},
		{"started by Cairn's code, in a library", `goroutine 10 [IO wait]:
internal/poll.runtime_pollWait(0x7f, 0x72)
	/usr/local/go/src/runtime/netpoll.go:351 +0x85
created by github.com/cairn-agents/cairn/store/jetstream/natstest.Server in goroutine 5
	/src/store/jetstream/natstest/natstest.go:40 +0x1`, true},
		{"a NATS connection left open", `goroutine 11 [select]:
github.com/nats-io/nats.go.(*Conn).flusher(0xc0003)
	/go/pkg/mod/github.com/nats-io/nats.go@v1.48.0/nats.go:3500 +0x1
created by github.com/nats-io/nats.go.(*Conn).processConnectInit in goroutine 1
	/go/pkg/mod/github.com/nats-io/nats.go@v1.48.0/nats.go:2300 +0x1`, true},
		{"the checker's own", `goroutine 12 [running]:
github.com/cairn-agents/cairn/internal/leakcheck.Find()
	/src/internal/leakcheck/leakcheck.go:70 +0x1`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leakcheck.Watched(tc.stack); got != tc.want {
				t.Errorf("Watched = %v; want %v", got, tc.want)
			}
		})
	}
}
