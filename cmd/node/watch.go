package main

import (
	"context"
	"fmt"
	"time"
)

// Bounds of the embedded server's watch.
const (
	// jetStreamCheck is how often serve looks at the embedded server's
	// JetStream.
	jetStreamCheck = 5 * time.Second
	// jetStreamStrikes is how many checks in a row must find it unable to
	// store before serve gives up.
	jetStreamStrikes = 3
)

// watchJetStream looks at the embedded NATS server's JetStream at every
// tick of tick and returns an error once healthy has failed strikes times
// in a row; nil when ctx ends first. What healthy reports lasts until the
// server restarts (nats-server turns JetStream off after a write it cannot
// make, and a single server's stream keeps its write error: see
// jetstream.Server.Healthy), so a node on the embedded server could only
// stay up unready for good: serve exits non-zero instead, and whoever
// supervises it starts it again, on a disk that may have room by then.
// With an external server (--nats) there is nothing to watch: the node
// stays up, not ready, and goes on once the server stores again.
func watchJetStream(ctx context.Context, tick <-chan time.Time, healthy func() error, strikes int) error {
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		}
		err := healthy()
		if err == nil {
			failed = 0
			continue
		}
		if failed++; failed >= strikes {
			return fmt.Errorf("the embedded NATS server cannot store until it restarts (%d checks in a row): %w", failed, err)
		}
	}
}
