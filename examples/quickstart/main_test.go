package main

import (
	"os"
	"testing"

	"github.com/cairn-agents/cairn/runtime/jsexec"
)

func TestMain(m *testing.M) {
	jsexec.MaybeRunWorker()
	os.Exit(m.Run())
}

// The README's first command must keep working.
func TestQuickstart(t *testing.T) {
	if err := run(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}
