package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/jsexec"
)

func TestMain(m *testing.M) {
	jsexec.MaybeRunWorker()
	maybeServeNATS()
	os.Exit(m.Run())
}

// The harness runs (CI checks only that; the figures are reported, never
// asserted: the machine is shared and noisy).
func TestSmoke(t *testing.T) {
	all := map[string]bool{}
	for _, s := range []string{"B1", "B1GC", "B2", "B3", "B4", "B5", "B6", "B7", "B8"} {
		all[s] = true
	}
	rows, err := run(context.Background(), smokeConfig(all))
	if err != nil {
		t.Fatal(err)
	}
	// B1, B1gc, B2, B3 and B6 have two rows each (writers 1 and 4; sync
	// modes; two scripts), B4, B5, B7 and B8 one.
	if len(rows) != 14 {
		t.Fatalf("%d rows, want 14", len(rows))
	}
	var b strings.Builder
	print(&b, rows)
	t.Log("\n" + b.String())
}

// BenchmarkB2 is B2 as a go benchmark (for benchstat across commits).
func BenchmarkB2(b *testing.B) {
	for i := 0; i < b.N; i++ {
		rows, err := run(context.Background(), config{duration: time.Second, reps: 1, scenarios: map[string]bool{"B2": true}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rows[0].ratio[0], "ratio-sync")
		b.ReportMetric(rows[1].ratio[0], "ratio-nosync")
	}
}

// BenchmarkB1 is B1 as a go benchmark: the store's commit rate over the raw
// fenced publish, 1 and 64 writers.
func BenchmarkB1(b *testing.B) {
	for i := 0; i < b.N; i++ {
		rows, err := run(context.Background(), config{duration: time.Second, reps: 1, writers: []int{1, 64}, scenarios: map[string]bool{"B1": true}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rows[0].ratio[0], "ratio-1-writer")
		b.ReportMetric(rows[1].ratio[0], "ratio-64-writers")
	}
}
