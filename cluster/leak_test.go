package cluster_test

import (
	"testing"

	"github.com/cairn-agents/cairn/internal/leakcheck"
)

// TestMain fails the package when a goroutine of Cairn's own (or a NATS
// connection or server) outlives its tests. goleak cannot be used here:
// protoactor-go leaves goroutines of its own behind (internal/leakcheck).
func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
