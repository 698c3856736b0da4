package api

import (
	"testing"

	"github.com/cairn-agents/cairn/internal/leakcheck"
)

// TestMain fails the package when a goroutine of Cairn's own outlives its
// tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m)
}
