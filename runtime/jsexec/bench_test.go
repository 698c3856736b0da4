package jsexec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
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

// BenchmarkAttempts compares the two ways of giving attempts workers, at 1
// and at 64 attempts at once: "per-attempt", a worker of the attempt's own
// from its first script to its end (what ModeWorker did before the pool:
// here a factory of one worker per attempt), and "pool", the factory's
// pool of 4 shared by every attempt. Each op is a round of attempts, all
// at once; each attempt runs 3 scripts of one callback, and between two
// scripts waits (on its model, say) until every attempt of the round has
// run the script before. Reported: ns/script, the wall time of a round
// over its scripts; procs, the most worker processes alive at the waits;
// rss-MB, their resident memory then, summed.
func BenchmarkAttempts(b *testing.B) {
	const scripts, workers = 3, 4
	for _, attempts := range []int{1, 64} {
		for _, design := range []string{"per-attempt", "pool"} {
			b.Run(fmt.Sprintf("%s/attempts=%d", design, attempts), func(b *testing.B) {
				newFactory := func() *Factory {
					n := workers
					if design == "per-attempt" {
						n = 1
					}
					f, err := New(WithWorkers(n))
					if err != nil {
						b.Fatal(err)
					}
					return f
				}
				shared := newFactory()
				var procs, rss int
				var spent time.Duration
				for b.Loop() {
					// waits[k] is the wait after script k: the round's last
					// attempt to get there measures the workers and lets
					// every attempt go on.
					waits := make([]*roundWait, scripts)
					for k := range waits {
						waits[k] = newRoundWait(attempts, func() {
							n, r := workerUsage()
							procs, rss = max(procs, n), max(rss, r)
						})
					}
					start := time.Now()
					var wg sync.WaitGroup
					errs := make(chan error, attempts)
					for a := range attempts {
						wg.Add(1)
						go func() {
							defer wg.Done()
							f := shared
							if design == "per-attempt" {
								f = newFactory()
							}
							ex, err := f.NewExecutor(context.Background(), benchConfig)
							if err != nil {
								errs <- err
								return
							}
							defer ex.Close()
							for k := range scripts {
								out, err := ex.Execute(context.Background(), jstool.Script{CallID: fmt.Sprint(a, k), Code: `return (await caps.kv.get({key: "k"})).n`})
								if err == nil && (out.Failure != nil || string(out.Value) != "1") {
									err = fmt.Errorf("outcome %s %+v", out.Value, out.Failure)
								}
								if err != nil {
									errs <- err
								}
								waits[k].arrive()
							}
						}()
					}
					wg.Wait()
					spent += time.Since(start)
					close(errs)
					for err := range errs {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*attempts*scripts), "ns/script")
				b.ReportMetric(float64(procs), "procs")
				b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
			})
		}
	}
}

// roundWait lets n goroutines go on once all have arrived; the last to
// arrive runs last first.
type roundWait struct {
	mu   sync.Mutex
	n    int
	last func()
	all  chan struct{}
}

func newRoundWait(n int, last func()) *roundWait {
	return &roundWait{n: n, last: last, all: make(chan struct{})}
}

func (w *roundWait) arrive() {
	w.mu.Lock()
	w.n--
	if w.n == 0 {
		w.last()
		close(w.all)
	}
	w.mu.Unlock()
	<-w.all
}

// workerUsage counts this process's children and sums their resident
// memory (VmRSS), in bytes.
func workerUsage() (n, rss int) {
	for _, c := range children() {
		pid, _, _ := strings.Cut(c, "(")
		b, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			continue
		}
		n++
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				rss += kb << 10
			}
		}
	}
	return n, rss
}
