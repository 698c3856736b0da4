package jetstream_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// BenchmarkCommit compares Cairn's SaveCheckpoint with its physical limit
// measured in the same process: a raw 1 KiB publish fenced with the
// expected last subject sequence and a synchronous ack, under SyncAlways.
// Each writer owns one run (or one subject). Reported: commits/s and
// per-commit latency p50/p99.
//
//	go test -run=NONE -bench=Commit -benchtime=3s ./store/jetstream/
func BenchmarkCommit(b *testing.B) {
	srv := natstest.Server(b)
	nc := natstest.Connect(b, srv)
	s := newStore(&testing.T{}, nc, jetstream.Config{})
	js, _ := njs.New(nc)
	payload := strings.Repeat("x", 1024)
	var round atomic.Int64
	for _, writers := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("raw/writers=%d", writers), func(b *testing.B) {
			r := round.Add(1)
			commits(b, writers, func(w int) func(ctx context.Context) error {
				subj := fmt.Sprintf("cairn.sess.raw%d-%d.run.r.ckpt", r, w)
				var last uint64
				return func(ctx context.Context) error {
					msg := nats.NewMsg(subj)
					msg.Data = []byte(payload)
					ack, err := js.PublishMsg(ctx, msg, njs.WithExpectLastSequenceForSubject(last, subj))
					if err == nil {
						last = ack.Sequence
					}
					return err
				}
			})
		})
		b.Run(fmt.Sprintf("store/writers=%d", writers), func(b *testing.B) {
			r := round.Add(1)
			commits(b, writers, func(w int) func(ctx context.Context) error {
				h, err := s.Open(context.Background(), fmt.Sprintf("st%d-%d", r, w), "r")
				if err != nil {
					b.Fatal(err)
				}
				// A run loads its window once, at activation (the loop's
				// first model boundary); that read is not a commit's cost.
				if _, err := h.Load(context.Background()); err != nil {
					b.Fatal(err)
				}
				rev := int64(0)
				return func(ctx context.Context) error {
					rev++
					c := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseModel,
						Append: []model.Message{model.TextMessage(fmt.Sprintf("k-%d-0", rev), model.RoleUser, payload)}}
					return h.SaveCheckpoint(ctx, c)
				}
			})
		})
	}
}

// commits runs b.N commits spread over writers goroutines, each with the
// commit function newWriter(w) gives it, and reports throughput and latency.
func commits(b *testing.B, writers int, newWriter func(w int) func(ctx context.Context) error) {
	fns := make([]func(context.Context) error, writers)
	for w := range fns {
		fns[w] = newWriter(w)
	}
	lat := make([][]time.Duration, writers)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				if err := fns[w](context.Background()); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
}
