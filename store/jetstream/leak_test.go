package jetstream_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its tests: every
// server, connection, consumer and writer a test starts is closed by it.
func TestMain(m *testing.M) {
	holdStore() // the helper process of TestStoreDirectoryHeldByAnother
	goleak.VerifyTestMain(m)
}
