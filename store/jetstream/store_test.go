package jetstream_test

import (
	"context"
	"testing"

	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/store/storetest"
)

func TestConformanceR1(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		nc := natstest.Connect(t, natstest.Server(t))
		s, err := jetstream.New(context.Background(), nc, jetstream.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
