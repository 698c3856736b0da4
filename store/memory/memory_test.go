package memory_test

import (
	"testing"

	"github.com/cairn-agents/cairn/store/memory"
	"github.com/cairn-agents/cairn/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener { return memory.New() })
}
