package actors_test

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	cruntime "github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

func oneChild() *model.Scripted {
	return &model.Scripted{Steps: []model.Response{
		model.Reply(model.Call("a", "spawn_worker", `{"n":1}`)),
		model.Reply(model.Call("w", "wait_calls", `{"ids":["a"],"timeout_seconds":3600}`)),
		model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"one"}}`)),
	}}
}

// BenchmarkSpawnRoundTrip: a root run spawns one child, parks, is woken by
// the child's completion and completes; one op is the whole round trip
// (4 model steps, 2 runs, SyncAlways).
//
//	go test -run=NONE -bench=SpawnRoundTrip -benchtime=50x ./actors/
func BenchmarkSpawnRoundTrip(b *testing.B) {
	nc := natstest.Connect(b, natstest.Server(b))
	h := &harness{nc: nc, parent: oneChild(), child: childModel{}}
	n := h.start(b)
	defer closeNode(b, n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sess, run, err := n.Run(context.Background(), "planner", fmt.Sprintf("Round %d.", i))
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, _, err := n.Result(ctx, sess, run)
		cancel()
		if err != nil || st != cruntime.StatusCompleted {
			b.Fatalf("%s %v", st, err)
		}
	}
}

var parkedRuns = flag.Int("parked", 10000, "parked runs for BenchmarkParkedRunMemory")

// BenchmarkParkedRunMemory parks many root runs, each waiting (one-hour
// deadline) on a child that blocks inside its model, lets the parents'
// actors passivate, and reports the heap per parked parent, the child's
// blocked attempt included. The server runs without SyncAlways to make
// setup fast; memory does not depend on it.
//
//	go test -run=NONE -bench=ParkedRunMemory -benchtime=1x ./actors/
func BenchmarkParkedRunMemory(b *testing.B) {
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: b.TempDir(), Port: -1, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(context.Background())
	nc := natstest.Connect(b, srv)
	g := &gate{}
	p := &parked{}
	h := &harness{nc: nc, parent: oneChild(), child: childModel{g: g}, sink: p.sink, budget: cruntime.Budget{Timeout: 24 * time.Hour}, idle: time.Second}
	n := h.start(b)
	defer closeNode(b, n)
	stops := watchStops(b, n)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	before := heap()
	start := time.Now()
	runs := make([][2]string, *parkedRuns)
	for i := range runs {
		sess, run, err := n.Run(context.Background(), "planner", fmt.Sprintf("Park %d.", i))
		if err != nil {
			b.Fatal(err)
		}
		runs[i] = [2]string{sess, run}
	}
	for _, r := range runs {
		waitParked(&testing.T{}, p, r[1])
		waitEvent(b, stops.of(r[0]+"."+r[1]), "a parked parent passivates (IdleTimeout 1s)")
	}
	after := heap()
	b.ReportMetric(float64(after-before)/float64(len(runs)), "heap-B/parked-run")
	b.ReportMetric(time.Since(start).Seconds(), "setup-s")
}
