package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// The consumer follows a run written by the store to its completion and
// describes every event.
func TestFollowRun(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	s, err := jetstream.New(context.Background(), nc, jetstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sc := runtimetest.Scenarios()[0]
	h := runtimetest.NewHost(t, s, sc.Steps...)
	if _, err := h.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	js, _ := njs.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := follow(ctx, js, h.Session, h.Run, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"cairn.lease.acquired run r1 attempt", "cairn.checkpoint.committed run r1 revision 1 phase model", "reply output"} {
		if !strings.Contains(got, want) {
			t.Fatalf("output lacks %q:\n%s", want, got)
		}
	}
	if err := follow(ctx, js, "bad session", "", &out); err == nil || !strings.Contains(err.Error(), "--session") {
		t.Fatalf("bad session: %v", err)
	}
}
