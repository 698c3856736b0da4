package actors

import (
	"errors"

	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
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

// outcomeOf maps an attempt's error to the core's outcome.
func outcomeOf(err error) lifecycle.Outcome {
	switch {
	case err == nil:
		return lifecycle.Completed
	case errors.Is(err, runtime.ErrWaiting):
		return lifecycle.Waiting
	case errors.Is(err, runtime.ErrDrained):
		return lifecycle.Drained
	case errors.Is(err, errUpgradeDue):
		return lifecycle.Upgrading
	case errors.Is(err, errEnded):
		return lifecycle.Ended
	case errors.Is(err, errNotCreated):
		return lifecycle.NotYetCreated
	case errors.Is(err, events.ErrUnknownVersion):
		// Before the other classes: a newer build's event is neither an
		// outage nor the run's failure.
		return lifecycle.Unreadable
	case errors.Is(err, runtime.ErrLeaseLost), errors.Is(err, runtime.ErrConflict), errors.Is(err, runtime.ErrSessionBusy):
		return lifecycle.FencedOut
	case permanent(err):
		return lifecycle.Permanent
	case unavailable(err):
		return lifecycle.Unavailable
	}
	return lifecycle.Transient
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func waitCallID(res *runtime.Result) string {
	if res == nil {
		return ""
	}
	return res.WaitCallID
}

// permanent reports an attempt's error that a retry cannot mend: the run
// fails at once, without spending another attempt (and a budget step) on
// it. A model error is permanent when the provider's answer says so (400,
// 401, 403, 404, 422, a malformed response: model.ErrPermanent).
func permanent(err error) bool {
	return errors.Is(err, errPermanent) || errors.Is(err, ErrBudget) || errors.Is(err, runtime.ErrInvalidInput) ||
		errors.Is(err, runtime.ErrContractMismatch) || errors.Is(err, model.ErrPermanent)
}
