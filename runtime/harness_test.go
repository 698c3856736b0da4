package runtime_test

import (
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/memory"
)

// env is one host on the memory store.
type env = runtimetest.Host

func newEnv(t testing.TB, steps ...model.Response) *env {
	return runtimetest.NewHost(t, memory.New(), steps...)
}

const (
	outputSchema = runtimetest.OutputSchema
	claimSchema  = runtimetest.ClaimSchema
	textSchema   = runtimetest.TextSchema
)

var (
	calls          = runtimetest.Calls
	call           = runtimetest.Call
	completeOutput = runtimetest.CompleteOutput
	toolResult     = runtimetest.ToolResult
	dump           = runtimetest.Dump
)

func totalCalls(c *runtimetest.Controller) int { return c.Total() }
