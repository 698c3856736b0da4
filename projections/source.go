package projections

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// Source is the log a reader reads: the stream, and the keys that open
// what the node's payload codec sealed.
type Source struct {
	// JS reaches the stream; required.
	JS jetstream.JetStream
	// Stream is the log's stream; "" means events.DefaultStream.
	Stream string
	// Keys open events sealed by the node's payload codec; nil reads plain
	// events only (a sealed one is events.ErrSealed).
	Keys *events.Keyring
}

// Name is the stream's name.
func (s Source) Name() string {
	return events.StreamName(s.Stream)
}
