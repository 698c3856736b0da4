package jsexec

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// fuzzLimits keep each input short: a tight time limit and small bounds.
var fuzzLimits = Limits{
	Timeout:          100 * time.Millisecond,
	MaxCallStackSize: 500,
	MemoryBytes:      64 << 20,
	MaxResultBytes:   64 << 10,
	MaxConsoleBytes:  64 << 10,
	MaxLogLines:      20,
	MaxLogBytes:      4 << 10,
	MaxCallbacks:     50,
}

// FuzzInProcess feeds arbitrary source to an in-process executor: no panic
// may escape Execute or Close, every Execute ends (the test's own deadline
// would catch a hang), and the outcome keeps its invariants. The seed
// corpus is in testdata/fuzz/FuzzInProcess.
func FuzzInProcess(f *testing.F) {
	fac, err := New(WithMode(ModeInProcess), WithLimits(fuzzLimits))
	if err != nil {
		f.Fatal(err)
	}
	fac.s.grace = 200 * time.Millisecond
	kinds := map[string]bool{"exception": true, "timeout": true, "limit": true}
	f.Fuzz(func(t *testing.T, code string) {
		fk := newFake()
		fk.barrier = 2
		ex, err := fac.NewExecutor(context.Background(), jstool.Config{Capabilities: fk.infos(), Invoke: fk.invoke})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := ex.Execute(ctx, jstool.Script{CallID: "fuzz", Code: code})
		if cerr := ex.Close(); cerr != nil {
			t.Fatalf("Close: %v", cerr)
		}
		if err != nil {
			t.Fatalf("Execute: %v", err)
		}
		if len(out.Logs) > fuzzLimits.MaxLogLines {
			t.Fatalf("%d log lines kept", len(out.Logs))
		}
		if out.Failure != nil {
			if !kinds[out.Failure.Kind] {
				t.Fatalf("failure kind %q", out.Failure.Kind)
			}
			if strings.Contains(out.Failure.Message, "internal error in the JavaScript engine") {
				t.Fatalf("goja panicked: %s", out.Failure.Message)
			}
			return
		}
		if !json.Valid(out.Value) || len(out.Value) > fuzzLimits.MaxResultBytes {
			t.Fatalf("result %q", short(string(out.Value)))
		}
	})
}
