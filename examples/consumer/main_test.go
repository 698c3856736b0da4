package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// The consumer follows a run written by the store to its completion and
// describes every event; with the node's payload keys, a sealed log too.
func TestFollowRun(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) {
			var keys *events.Keyring
			if sealed {
				line, err := events.NewKey("k1")
				if err == nil {
					keys, err = events.ParseKeyring(line)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			nc := natstest.Connect(t, natstest.Server(t))
			s, err := jetstream.New(context.Background(), nc, jetstream.Config{Keys: keys})
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
			if err := follow(ctx, js, keys, h.Session, h.Run, &out); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			for _, want := range []string{"cairn.lease.acquired run r1 attempt", "cairn.checkpoint.committed run r1 revision 1 phase model", "reply output"} {
				if !strings.Contains(got, want) {
					t.Fatalf("output lacks %q:\n%s", want, got)
				}
			}
			if sealed {
				// Without the keys an event is skipped, naming the key (the
				// reader stops at the first: the run's end, which would
				// stop it, is sealed too).
				short, cancel := context.WithCancel(ctx)
				defer cancel()
				w := &stopAtSkip{stop: cancel}
				_ = follow(short, js, nil, h.Session, h.Run, w)
				if !strings.Contains(w.String(), `skipped: events: sealed with a key this reader does not have (key "k1")`) || strings.Contains(w.String(), "revision") {
					t.Fatalf("a reader without the keys printed:\n%s", w.String())
				}
			}
			if err := follow(ctx, js, keys, "bad session", "", &out); err == nil || !strings.Contains(err.Error(), "--session") {
				t.Fatalf("bad session: %v", err)
			}
		})
	}
}

// stopAtSkip stops a follow at its first skipped event.
type stopAtSkip struct {
	bytes.Buffer
	stop func()
}

func (w *stopAtSkip) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("skipped")) {
		w.stop()
	}
	return w.Buffer.Write(p)
}
