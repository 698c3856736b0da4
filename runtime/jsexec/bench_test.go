package jsexec

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// benchInvoke answers every callback at once.
func benchInvoke(ctx context.Context, callID string, seq int, capability string, args json.RawMessage) (jstool.Value, error) {
	return jstool.Value{JSON: json.RawMessage(`{"n":1}`)}, nil
}

var benchConfig = jstool.Config{Capabilities: []jstool.CapabilityInfo{{Name: "kv.get"}}, Invoke: benchInvoke}

const callbacks100 = `let s = 0; for (let i = 0; i < 100; i++) s += (await caps.kv.get({key: "k" + i})).n; return s`

func benchFactory(b *testing.B, mode Mode) *Factory {
	b.Helper()
	f, err := New(WithMode(mode))
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkNewExecutor: NewExecutor and Close. In process this allocates
// the realm; a worker starts only on the first Execute.
func BenchmarkNewExecutor(b *testing.B) {
	for _, mode := range modes {
		b.Run(mode.String(), func(b *testing.B) {
			f := benchFactory(b, mode)
			b.ReportAllocs()
			for b.Loop() {
				ex, err := f.NewExecutor(context.Background(), benchConfig)
				if err != nil {
					b.Fatal(err)
				}
				ex.Close()
			}
		})
	}
}

// BenchmarkFirstScript: a realm from nothing to its first result and
// closed: what the first run_js of an attempt costs.
func BenchmarkFirstScript(b *testing.B) {
	for _, mode := range modes {
		b.Run(mode.String(), func(b *testing.B) {
			f := benchFactory(b, mode)
			b.ReportAllocs()
			for b.Loop() {
				ex, err := f.NewExecutor(context.Background(), benchConfig)
				if err != nil {
					b.Fatal(err)
				}
				if out, err := ex.Execute(context.Background(), jstool.Script{CallID: "b", Code: `return 1`}); err != nil || out.Failure != nil {
					b.Fatal(err, out.Failure)
				}
				ex.Close()
			}
		})
	}
}

// benchScript runs code on a warm executor.
func benchScript(b *testing.B, code, want string) {
	for _, mode := range modes {
		b.Run(mode.String(), func(b *testing.B) {
			ex, err := benchFactory(b, mode).NewExecutor(context.Background(), benchConfig)
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			s := jstool.Script{CallID: "b", Code: code}
			if _, err := ex.Execute(context.Background(), s); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				out, err := ex.Execute(context.Background(), s)
				if err != nil || out.Failure != nil || string(out.Value) != want {
					b.Fatal(err, out.Failure, string(out.Value))
				}
			}
		})
	}
}

// BenchmarkTrivialScript: `return 1` on a warm executor.
func BenchmarkTrivialScript(b *testing.B) { benchScript(b, `return 1`, `1`) }

// BenchmarkCallbacks100: 100 sequential awaited callbacks on a warm
// executor.
func BenchmarkCallbacks100(b *testing.B) { benchScript(b, callbacks100, `100`) }

// BenchmarkTrivialScriptAfterWait: `return 1` on a warm in-process
// executor, each script started right after the calling goroutine waited
// for a timer, as a run's loop waits for each commit's acknowledgement.
// ns/script is the script's time alone. On the development VM (2 cores) it
// was 3-4x the time with no wait (40-49 µs against 12): work resumed after
// an idle wait runs cold (a halted core, its caches), and json.Marshal of a
// 10-call journal or a goroutine hand-off slowed the same way (3x, 20x) in
// a plain test program. A lone run pays this after every commit; the raw
// publishes it is measured against (test/bench B2) have no work between
// them.
func BenchmarkTrivialScriptAfterWait(b *testing.B) {
	b.Run("executor", func(b *testing.B) { benchAfterWait(b, false) })
	// The realm built and run on the calling goroutine, with no host: the
	// share of the hand-off to the realm's host and back (Execute's own
	// work: its contexts, its timer) is the difference. The host is not optional: it
	// is what lets Execute return from a builtin Interrupt cannot reach.
	b.Run("realm-inline", func(b *testing.B) { benchAfterWait(b, true) })
}

func benchAfterWait(b *testing.B, inline bool) {
	for _, wait := range []time.Duration{0, 250 * time.Microsecond} {
		b.Run("wait="+wait.String(), func(b *testing.B) {
			ex, err := benchFactory(b, ModeInProcess).NewExecutor(context.Background(), benchConfig)
			if err != nil {
				b.Fatal(err)
			}
			defer ex.Close()
			s := jstool.Script{CallID: "b", Code: `return 1`}
			run := ex.Execute
			if inline {
				io := runIO{dispatch: func(int, string, json.RawMessage) error { return nil }, results: fixed(make(chan callResult))}
				run = func(ctx context.Context, s jstool.Script) (jstool.Outcome, error) {
					r, err := newRealm([]string{"kv.get"}, DefaultLimits(), false)
					if err != nil {
						return jstool.Outcome{}, err
					}
					return r.run(ctx, s, io)
				}
			}
			var spent time.Duration
			for b.Loop() {
				if wait > 0 {
					<-time.After(wait)
				}
				start := time.Now()
				out, err := run(context.Background(), s)
				spent += time.Since(start)
				if err != nil || out.Failure != nil {
					b.Fatal(err, out.Failure)
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "ns/script")
		})
	}
}
