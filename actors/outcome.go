package actors

import (
	"errors"

	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// unavailable reports whether an attempt's error says the log could not be
// reached or could not store: NATS down, reconnecting or closed, no
// JetStream responder or stream leader, a request timing out, a stream or
// disk that refuses writes for lack of room (cjs.Unavailable), or the
// node's own refusal for one of those (ErrUnavailable). That is an outage:
// the run waits it out, backing off, without counting it against
// MaxRetries, however long it lasts. A permanent error (a budget spent, an
// input refused) is never one, even when it wraps a timeout (the
// wall-clock budget's deadline passing is a context.DeadlineExceeded).
func unavailable(err error) bool {
	if err == nil || permanent(err) {
		return false
	}
	return errors.Is(err, ErrUnavailable) || cjs.Unavailable(err)
}
