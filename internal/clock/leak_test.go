package clock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its tests (a fake
// timer's AfterFunc that fired, a real timer's).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
