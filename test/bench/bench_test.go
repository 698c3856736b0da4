package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/internal/leakcheck"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	memstore "github.com/cairn-agents/cairn/store/memory"
)

func TestMain(m *testing.M) {
	jsexec.MaybeRunWorker()
	maybeServeNATS()
	// A goroutine of Cairn's own (or a NATS connection or server) that
	// outlives the tests fails them (internal/leakcheck: goleak counts
	// protoactor-go's own, which it leaves behind).
	leakcheck.Main(m)
}

// The harness runs (CI checks only that; the figures are reported, never
// asserted: the machine is shared and noisy).
func TestSmoke(t *testing.T) {
	all := map[string]bool{}
	for _, s := range []string{"B1", "B1GC", "B1S", "B2", "B3", "B3GC", "B4", "B5", "B6", "B7", "B8", "W1", "W2", "P1", "T1"} {
		all[s] = true
	}
	rows, err := run(context.Background(), smokeConfig(all))
	if err != nil {
		t.Fatal(err)
	}
	// B1, B1gc, B1s, B2, B3, B3gc, B6 and P1 have two rows each (writers
	// 1 and 4; sync modes; two scripts), B4, B5, B7, B8 and T1 one; W1
	// three (two shapes, one at 1 and 64 runs); W2 four (two shapes, two
	// stores).
	if len(rows) != 28 {
		t.Fatalf("%d rows, want 28", len(rows))
	}
	var b strings.Builder
	print(&b, rows)
	t.Log("\n" + b.String())
}

// BenchmarkScenarios runs every scenario as a go benchmark, one
// sub-benchmark each (BenchmarkScenarios/B3 ...), reporting each row's
// ratio as a metric named after the row's position (ratio-row0 ...), so
// benchstat can compare commits:
//
//	go test -run '^$' -bench Scenarios -count 6 ./test/bench > new.txt
//
// The sizes are modest (a benchmark run should take minutes, not an
// hour); the harness (go run ./test/bench) makes the README's table.
func BenchmarkScenarios(b *testing.B) {
	for _, s := range []string{"B1", "B1GC", "B1S", "B2", "B3", "B3GC", "B4", "B5", "B6", "B7", "B8", "P1"} {
		b.Run(s, func(b *testing.B) {
			cfg := config{duration: time.Second, runDuration: 8 * time.Second, reps: 1, writers: []int{1, 64}, scenarios: map[string]bool{s: true},
				parked: []int{1000}, chain: 10, b8Runs: 200, b8Events: 100, b7Runs: 500}
			for i := 0; i < b.N; i++ {
				rows, err := run(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				for j, r := range rows {
					b.ReportMetric(r.ratio[0], fmt.Sprintf("ratio-row%d", j))
				}
			}
		})
	}
}

// waitingStore delays each commit by a timer before making it, as a
// commit's fsync makes its run wait: the core idles, and the work after it
// runs as it does after a real commit, without the disk's noise.
type waitingStore struct {
	runtime.Store
	wait   time.Duration
	waited time.Duration
}

func (s *waitingStore) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if s.wait > 0 {
		start := time.Now()
		<-time.After(s.wait)
		s.waited += time.Since(start)
	}
	return s.Store.SaveCheckpoint(ctx, cp)
}

// BenchmarkB2MemoryStore runs B2's run on the memory store. At wait=0s no
// commit waits: the loop's own work per call on a warm core (and the
// memory store's JSON round trips of the transcript, which the JetStream
// store does not make). At wait=250µs each commit waits first, about a
// SyncAlways commit here: own-µs/call is the run's time per call less its
// commits' waits, B2's "own time" without the disk's noise. cpu-µs/call is
// the process's CPU time per call, on both cores: less noisy than the wall
// clock, and it counts the work of waking the other core that a goroutine
// hand-off makes:
//
//	go test -run '^$' -bench B2MemoryStore ./test/bench
func BenchmarkB2MemoryStore(b *testing.B) {
	exec, err := jsexec.New(jsexec.WithMode(jsexec.ModeInProcess))
	if err != nil {
		b.Fatal(err)
	}
	run := b2Run(exec)
	ctx := context.Background()
	for _, wait := range []time.Duration{0, 250 * time.Microsecond} {
		b.Run("wait="+wait.String(), func(b *testing.B) {
			b.ReportAllocs()
			var waited time.Duration
			cpu0 := cpuTime()
			for b.Loop() {
				h, err := memstore.New().Open(ctx, "s", "r")
				if err != nil {
					b.Fatal(err)
				}
				s := &waitingStore{Store: h, wait: wait}
				if err := run(ctx, s); err != nil {
					b.Fatal(err)
				}
				waited += s.waited
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*b2Calls), "ns/call")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*b2Calls), "cpu-µs/call")
			b.ReportMetric(float64((b.Elapsed()-waited).Microseconds())/float64(b.N*b2Calls), "own-µs/call")
		})
	}
}
