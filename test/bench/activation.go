package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// b8: activation. runs x events commits are written interleaved (each
// round commits one revision of every run), so one run's 100 events lie
// spread over the whole stream. Cairn's activation of a run is Open (its
// lease: reads and one fenced write) and Load (its window); the baseline
// is the least the same needs: one batched direct get of the session's
// events and one fenced publish.
func b8(ctx context.Context, cfg config, runs, perRun int) (row, error) {
	_, nc, done, err := server(false)
	if err != nil {
		return row{}, err
	}
	defer done()
	s, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc})
	if err != nil {
		return row{}, err
	}
	id := round.Add(1)
	sessions := make([]string, runs)
	handles := make([]runtime.Store, runs)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("b8-%d-%d", id, i)
		if handles[i], err = s.Open(ctx, sessions[i], "r"); err != nil {
			return row{}, err
		}
		if _, err := handles[i].Load(ctx); err != nil {
			return row{}, err
		}
	}
	t0 := time.Now()
	for rev := int64(1); rev < int64(perRun); rev++ { // the lease is the first event
		err := inParallel(runs, runs, func(i int) error {
			return handles[i].SaveCheckpoint(ctx, &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: "h", Revision: rev, RunKey: "k", Phase: runtime.PhaseModel,
				Append: []model.Message{model.TextMessage(fmt.Sprintf("k-%d-0", rev), model.RoleUser, "a message of a busy stream")}})
		})
		if err != nil {
			return row{}, fmt.Errorf("b8 setup: %w", err)
		}
	}
	setup := time.Since(t0)
	js, _ := njs.New(nc)
	order := rand.Perm(runs)
	next := 0
	pick := func() string {
		sess := sessions[order[next%runs]]
		next++
		return sess
	}
	cairn, err := newLoader(1, func(int) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			h, err := s.Open(ctx, pick(), "r")
			if err != nil {
				return err
			}
			msgs, err := h.Load(ctx)
			if err == nil && len(msgs) < perRun-1 {
				err = fmt.Errorf("b8: loaded %d messages, want %d", len(msgs), perRun-1)
			}
			return err
		}, nil
	})
	if err != nil {
		return row{}, err
	}
	fences := map[string]uint64{}
	base, err := newLoader(1, func(int) (func(context.Context) error, error) {
		return func(ctx context.Context) error {
			sess := pick()
			n, err := directGetAll(ctx, nc, events.DefaultStream, events.SessionAll(sess))
			if err != nil {
				return err
			}
			if n < perRun {
				return fmt.Errorf("b8 baseline: %d events, want %d", n, perRun)
			}
			subj := events.CheckpointSubject(fmt.Sprintf("rawb8%d", id), "r", false)
			msg := nats.NewMsg(subj)
			msg.Data = []byte(payload)
			ack, err := js.PublishMsg(ctx, msg, njs.WithExpectLastSequenceForSubject(fences[subj], subj))
			if err == nil {
				fences[subj] = ack.Sequence
			}
			return err
		}, nil
	})
	if err != nil {
		return row{}, err
	}
	r := row{scenario: "B8", what: fmt.Sprintf("activation: a run of %d events among %d runs' (%d events)", perRun, runs, runs*perRun), target: 0.8,
		note: fmt.Sprintf("SyncAlways; Open (lease) + Load vs one batched direct get + one fenced publish; setup %s", setup.Round(time.Second))}
	for rep := 0; rep < cfg.reps; rep++ {
		st, raw, err := versus(cfg.duration, cairn, base)
		if err != nil {
			return row{}, err
		}
		r.ratio = append(r.ratio, st.rate/raw.rate)
		r.cairn = fmt.Sprintf("p50 %s p99 %s", st.p50.Round(10*time.Microsecond), st.p99.Round(10*time.Microsecond))
		r.baseline = fmt.Sprintf("p50 %s p99 %s", raw.p50.Round(10*time.Microsecond), raw.p99.Round(10*time.Microsecond))
	}
	return r, nil
}

// directGetAll reads every message on filter with batched direct gets (no
// consumer) and returns how many there were.
func directGetAll(ctx context.Context, nc *nats.Conn, stream, filter string) (int, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	var n int
	var last uint64
	seq := uint64(1)
	for {
		req, _ := json.Marshal(map[string]any{"batch": 1000, "next_by_subj": filter, "seq": seq})
		if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
			return 0, err
		}
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				return 0, err
			}
			switch m.Header.Get("Status") {
			case "":
				n++
				last, _ = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
				continue
			case "404":
				return n, nil
			case "204":
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				if pending == 0 {
					return n, nil
				}
				seq = last + 1
			default:
				return 0, fmt.Errorf("direct get: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
			}
			break
		}
	}
}
