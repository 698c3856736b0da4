package jsexec_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/jstool"
)

// The production setup: worker mode (the default). The test binary serves
// as its own worker because TestMain calls jsexec.MaybeRunWorker; a node's
// main must do the same.
func Example() {
	ctx := context.Background()
	factory, err := jsexec.New()
	if err != nil {
		panic(err)
	}
	ex, err := factory.NewExecutor(ctx, jstool.Config{
		Capabilities: []jstool.CapabilityInfo{{Name: "kv.get", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		// In the runtime this is (*jstool.Invoker).Invoke.
		Invoke: func(ctx context.Context, scriptCallID string, seq int, capability string, args json.RawMessage) (jstool.Value, error) {
			return jstool.Value{JSON: json.RawMessage(`{"value":21}`)}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	defer ex.Close()
	out, err := ex.Execute(ctx, jstool.Script{CallID: "call-1", Code: `
		const r = await caps.kv.get({key: "answer"});
		console.log("got", r.value);
		return {answer: r.value * 2};
	`})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out.Value), out.Logs[0].Text, out.Failure == nil)
	// Output: {"answer":42} got 21 true
}
