package runtime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// BenchmarkToolCall measures the loop's own cost per tool call: a run whose
// one response carries n trivial run_js calls, then completes, on the
// memory store (JSON round trips included) with a scripted model and the
// fake executor. ns/call and allocs/call divide the run by its calls.
func BenchmarkToolCall(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("calls=%d", n), func(b *testing.B) {
			parts := make([]model.Part, n)
			for i := range parts {
				parts[i] = call(fmt.Sprintf("c%d", i), "run_js", `{"code":"return 1"}`)
			}
			steps := []model.Response{calls(parts...), calls(completeOutput("done", "x"))}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := newEnv(b, steps...)
				res, err := runtime.Run(context.Background(), e.Input(e.Store()))
				if err != nil || res.Reply == nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(n+1)), "ns/call")
		})
	}
}
