package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dop251/goja"

	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/jstool"
)

// The baseline of B6 is goja itself, so this harness imports goja (the one
// place outside runtime/jsexec that does): a warm VM running the same
// script, with a Go function returning an already resolved promise as the
// callback, which is the least any host can do for an awaited callback.

const (
	trivialScript = `return 1`
	callbackLoop  = `let s = 0; for (let i = 0; i < 100; i++) s += (await caps.kv.get({key: "k" + i})).n; return s`
)

// bareGoja is a warm VM with caps.kv.get.
type bareGoja struct {
	vm *goja.Runtime
}

func newBareGoja() (*bareGoja, error) {
	vm := goja.New()
	caps := vm.NewObject()
	kv := vm.NewObject()
	result := vm.ToValue(map[string]any{"n": 1})
	if err := kv.Set("get", func(goja.FunctionCall) goja.Value {
		p, resolve, _ := vm.NewPromise()
		_ = resolve(result)
		return vm.ToValue(p)
	}); err != nil {
		return nil, err
	}
	if err := caps.Set("kv", kv); err != nil {
		return nil, err
	}
	if err := vm.Set("caps", caps); err != nil {
		return nil, err
	}
	return &bareGoja{vm: vm}, nil
}

// run runs code as the body of an async function, as run_js does, and
// returns its JSON value.
func (b *bareGoja) run(prog *goja.Program) (string, error) {
	v, err := b.vm.RunProgram(prog)
	if err != nil {
		return "", err
	}
	p, ok := v.Export().(*goja.Promise)
	if !ok || p.State() != goja.PromiseStateFulfilled {
		return "", fmt.Errorf("script did not settle: %v", v)
	}
	out, err := json.Marshal(p.Result().Export())
	return string(out), err
}

// b6: run_js (the in-process executor: realm, canonical invoker, outcome
// with logs) against bare goja, for a trivial script and for 100 awaited
// callbacks, on warm realms.
func b6(ctx context.Context, cfg config) ([]row, error) {
	f, err := jsexec.New(jsexec.WithMode(jsexec.ModeInProcess))
	if err != nil {
		return nil, err
	}
	ex, err := f.NewExecutor(ctx, jstool.Config{Capabilities: []jstool.CapabilityInfo{{Name: "kv.get", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Invoke: func(context.Context, string, int, string, json.RawMessage) (jstool.Value, error) {
			return jstool.Value{JSON: json.RawMessage(`{"n":1}`)}, nil
		}})
	if err != nil {
		return nil, err
	}
	defer ex.Close()
	bare, err := newBareGoja()
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, sc := range []struct{ what, code, want string }{
		{"run_js `return 1` (warm realm)", trivialScript, "1"},
		{"run_js 100 awaited callbacks (warm realm)", callbackLoop, "100"},
	} {
		prog, err := goja.Compile("bench", "(async function() {\n"+sc.code+"\n})()", false)
		if err != nil {
			return nil, err
		}
		script := jstool.Script{CallID: "b6", Code: sc.code}
		cairn, err := newLoader(1, func(int) (func(context.Context) error, error) {
			return func(ctx context.Context) error {
				out, err := ex.Execute(ctx, script)
				if err == nil && (out.Failure != nil || string(out.Value) != sc.want) {
					err = fmt.Errorf("run_js: %+v %s", out.Failure, out.Value)
				}
				return err
			}, nil
		})
		if err != nil {
			return nil, err
		}
		base, err := newLoader(1, func(int) (func(context.Context) error, error) {
			return func(context.Context) error {
				got, err := bare.run(prog)
				if err == nil && got != sc.want {
					err = fmt.Errorf("goja: %s", got)
				}
				return err
			}, nil
		})
		if err != nil {
			return nil, err
		}
		r := row{scenario: "B6", what: sc.what, target: 0, note: "in-process executor; ratio = goja time / run_js time"}
		d := cfg.duration / 2
		for rep := 0; rep < cfg.reps; rep++ {
			st, raw, err := versus(d, cairn, base)
			if err != nil {
				return nil, err
			}
			r.ratio = append(r.ratio, st.rate/raw.rate)
			r.cairn = fmt.Sprintf("%s per script (p50)", st.p50.Round(100*time.Nanosecond))
			r.baseline = fmt.Sprintf("bare goja %s per script (p50)", raw.p50.Round(100*time.Nanosecond))
		}
		rows = append(rows, r)
	}
	return rows, nil
}
