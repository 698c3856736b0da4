package actors

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// unavailable reports whether an attempt's error says the log could not be
// reached or could not store (NATS down or reconnecting, no JetStream
// responder, a request timing out, the node's own refusal for one of
// those): an outage, which the run waits out without counting it against
// MaxRetries. A permanent error is never one.
func unavailable(err error) bool {
	if err == nil || permanent(err) {
		return false
	}
	for _, target := range []error{
		ErrUnavailable, nats.ErrNoResponders, nats.ErrTimeout, nats.ErrConnectionClosed, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, nats.ErrNoServers, jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
