package runtime_test

import (
	"testing"

	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/memory"
	"github.com/cairn-agents/cairn/store/storetest"
)

// TestCrashMatrix runs the crash matrix on the memory store: every store
// operation failed in turn, before and after commit (see
// runtimetest.CrashMatrix for what it checks).
func TestCrashMatrix(t *testing.T) {
	runtimetest.CrashMatrix(t, func(*testing.T) storetest.Opener { return memory.New() }, runtimetest.Scenarios())
}
