package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// benchLog fills a stream with runs shaped like real ones: created, a
// lease, steps commits with an appended message each, a completion.
func benchLog(b *testing.B, runs, steps int) (njs.JetStream, int) {
	b.Helper()
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: b.TempDir(), Port: -1, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close(context.Background()) })
	nc, err := srv.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	ctx := context.Background()
	if _, err := jetstream.New(ctx, nc, jetstream.Config{}); err != nil {
		b.Fatal(err)
	}
	js, _ := njs.New(nc)
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	n := 0
	pub := func(subject string, e events.Envelope) {
		body, hdrs, err := events.Encode(e, fmt.Sprintf("b%d", n))
		if err != nil {
			b.Fatal(err)
		}
		m := nats.NewMsg(subject)
		m.Data = body
		for k, v := range hdrs {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for i := 0; i < runs; i++ {
		s, r := fmt.Sprintf("s%d", i), fmt.Sprintf("r%d", i)
		e, _ := events.New(events.RunCreated, s, r, 0, 0, at, events.Run{RunID: r, SessionID: s, Agent: "a", RootRunID: r, Owner: "o"})
		pub(events.RunCreatedSubject(s, r), e)
		e, _ = events.New(events.LeaseAcquired, s, r, 0, 1, at, events.Lease{Holder: "n", Epoch: 1})
		pub(events.RunLease(s, r), e)
		for k := 1; k <= steps; k++ {
			cp := runtime.Checkpoint{Version: 1, Revision: int64(k), RunKey: r, Step: k, Phase: runtime.PhaseModel,
				Append: []model.Message{model.TextMessage(fmt.Sprintf("%s-%d-0", r, k), model.RoleAssistant, "a step of moderate length, like a short model answer")}}
			if k == steps {
				cp.Reply = &runtime.Reply{Type: runtime.ReplyOutput, Output: json.RawMessage(`{"answer":"x"}`)}
			}
			body, _ := json.Marshal(cp)
			pub(events.CheckpointSubject(s, r, k == steps), events.NewRaw(events.CheckpointCommitted, s, r, int64(k), 1, at, events.CheckpointPayload(body)))
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publish did not complete")
	}
	return js, n
}

// BenchmarkRebuild compares a rebuild of the run index from sequence 1 with
// the raw rate of an ordered consumer reading the same stream, in the same
// process: both report stream events/s (the events of the whole log the
// pass covers). The figures are reported, never asserted.
func BenchmarkRebuild(b *testing.B) {
	const runs, steps = 5000, 8
	js, total := benchLog(b, runs, steps)
	ctx := context.Background()
	raw := func(b *testing.B) {
		st, _ := js.Stream(ctx, "CAIRN")
		cons, err := st.OrderedConsumer(ctx, njs.OrderedConsumerConfig{DeliverPolicy: njs.DeliverAllPolicy})
		if err != nil {
			b.Fatal(err)
		}
		it, err := cons.Messages()
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < total; i++ {
			if _, err := it.Next(); err != nil {
				b.Fatal(err)
			}
		}
		it.Stop()
	}
	rebuild := func(b *testing.B, p projections.Projection) {
		r, err := projections.Start(ctx, projections.Config{JS: js}, p)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.CatchUp(ctx); err != nil {
			b.Fatal(err)
		}
		_ = r.Close(ctx)
	}
	b.Run("raw-ordered-consumer", func(b *testing.B) {
		for b.Loop() {
			raw(b)
		}
		b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "events/s")
	})
	// The ratio from passes interleaved in one loop, so that load from
	// elsewhere on the machine hits both alike.
	b.Run("runindex-over-raw", func(b *testing.B) {
		var tRaw, tIx time.Duration
		for b.Loop() {
			t0 := time.Now()
			raw(b)
			t1 := time.Now()
			rebuild(b, projections.NewRuns())
			tRaw, tIx = tRaw+t1.Sub(t0), tIx+time.Since(t1)
		}
		b.ReportMetric(tRaw.Seconds()/tIx.Seconds(), "rate-ratio")
		b.ReportMetric(float64(total*b.N)/tIx.Seconds(), "index-events/s")
		b.ReportMetric(float64(total*b.N)/tRaw.Seconds(), "raw-events/s")
	})
	for _, mk := range models() {
		b.Run("rebuild-"+mk().Name(), func(b *testing.B) {
			for b.Loop() {
				rebuild(b, mk())
			}
			b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
	b.Run("restore-saved-calltree", func(b *testing.B) {
		cfg := projections.Config{JS: js, StateBucket: "CAIRN_PROJ_BENCH"}
		r, err := projections.Start(ctx, cfg, projections.NewCallTree())
		if err != nil {
			b.Fatal(err)
		}
		if err := r.CatchUp(ctx); err != nil {
			b.Fatal(err)
		}
		_ = r.Close(ctx)
		for b.Loop() {
			r, err := projections.Start(ctx, cfg, projections.NewCallTree())
			if err != nil {
				b.Fatal(err)
			}
			if err := r.CatchUp(ctx); err != nil {
				b.Fatal(err)
			}
			_ = r.Close(ctx)
		}
		b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
