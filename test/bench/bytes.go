package main

import (
	"context"
	"fmt"
	"strings"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	memstore "github.com/cairn-agents/cairn/store/memory"
)

// w2Target is the log bytes per tool call a run should stay under,
// whatever the number of calls one response makes (the log's issue: a
// run's bytes linear in its calls).
const w2Target = 3 * 1024

// w2Shape is a run's shape: perStep run_js calls in each of steps model
// responses, then complete.
type w2Shape struct {
	name           string
	perStep, steps int
}

// w2: bytes of log per tool call, by the shape of the run: one run_js per
// step, and 10, 100 and 1,000 in one response. On the JetStream store
// every stream's bytes are counted on the server (the log, and the object
// bucket that holds large payloads); on the memory store, the bytes it
// encodes per commit (each checkpoint, and the messages it
// appends). The baseline is the target, 3 KB per call; the ratio is the
// target over Cairn's bytes (1.0 or more: within it).
func w2(ctx context.Context, cfg config) ([]row, error) {
	shapes := []w2Shape{{"1 run_js per step, 10 steps", 1, 10}, {"10 run_js in one response", 10, 1}, {"100 run_js in one response", 100, 1}, {"1,000 run_js in one response", 1000, 1}}
	if cfg.smoke {
		shapes = shapes[:2]
	}
	_, nc, done, err := server(false)
	if err != nil {
		return nil, err
	}
	defer done()
	s, err := jetstream.New(ctx, nc, jetstream.Config{GroupCommit: cfg.gc})
	if err != nil {
		return nil, err
	}
	defer s.Close(context.WithoutCancel(ctx))
	js, _ := njs.New(nc)
	exec, err := jsexec.New(jsexec.WithMode(jsexec.ModeInProcess))
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, sh := range shapes {
		calls := float64(sh.perStep*sh.steps + 1)
		run := shapeRun(exec, sh)
		// The same run on both stores: the log's bytes, counted on the
		// server, and the memory store's.
		before, err := streamBytes(ctx, js)
		if err != nil {
			return nil, err
		}
		id := round.Add(1)
		h, err := s.Open(ctx, fmt.Sprintf("w2-%d", id), "r")
		if err != nil {
			return nil, err
		}
		if err := run(ctx, h); err != nil {
			return nil, fmt.Errorf("w2 %s: %w", sh.name, err)
		}
		after, err := streamBytes(ctx, js)
		if err != nil {
			return nil, err
		}
		var logBytes float64
		var parts []string
		for name, b := range after {
			if b > before[name] {
				d := float64(b - before[name])
				logBytes += d
				if name != events.DefaultStream {
					parts = append(parts, fmt.Sprintf("%s %.0f B", name, d/calls))
				}
			}
		}
		db := memstore.New()
		mh, err := db.Open(ctx, "s", "r")
		if err != nil {
			return nil, err
		}
		if err := run(ctx, mh); err != nil {
			return nil, fmt.Errorf("w2 %s, memory store: %w", sh.name, err)
		}
		for _, st := range []struct {
			store string
			bytes float64
			extra []string
		}{{"JetStream", logBytes, parts}, {"memory", float64(db.Stats()), nil}} {
			perCall := st.bytes / calls
			r := row{scenario: "W2", what: fmt.Sprintf("log bytes per tool call, %s, %s store", sh.name, st.store), target: 1,
				note: "every stream's bytes on the server (JetStream); each commit's checkpoint and messages as the store encodes them (memory)"}
			r.cairn = fmt.Sprintf("%.0f B per call", perCall)
			if len(st.extra) > 0 {
				r.cairn += " (of which " + strings.Join(st.extra, ", ") + ")"
			}
			r.baseline = fmt.Sprintf("target %d B per call", w2Target)
			r.ratio = []float64{w2Target / perCall}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// shapeRun returns a run of sh's shape on the in-process executor.
func shapeRun(exec runtime.ExecutorFactory, sh w2Shape) func(context.Context, runtime.Store) error {
	var steps []model.Response
	for st := 0; st < sh.steps; st++ {
		parts := make([]model.Part, sh.perStep)
		for i := range parts {
			parts[i] = model.Call(fmt.Sprintf("call_%d_%d", st, i), "run_js", `{"code":"return 1"}`)
		}
		steps = append(steps, model.Reply(parts...))
	}
	steps = append(steps, model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)))
	return func(ctx context.Context, h runtime.Store) error {
		host := runtimetest.NewHost(nil, nil, steps...)
		in := host.Input(h)
		in.ExecutorFactory = exec
		in.Definition.Subagents, in.Subagents = nil, nil
		in.Controller = &runtimetest.Controller{}
		res, err := runtime.Run(ctx, in)
		if err == nil && res.Reply == nil {
			err = fmt.Errorf("run of %s: no reply", sh.name)
		}
		return err
	}
}

// streamBytes is every stream's bytes on the server, by name.
func streamBytes(ctx context.Context, js njs.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = st.CachedInfo().State.Bytes
	}
	return out, names.Err()
}
