package actors

import (
	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/actors/lifecycle"
)

// reasonOf is the typed wake reason of the node's internal wake texts.
// TODO(lifecycle adapter): the texts go when the actor is the core's adapter.
func reasonOf(text string) lifecycle.Reason {
	switch text {
	case "started", "spawned", "adopted":
		return lifecycle.ReasonStarted
	case "child finished":
		return lifecycle.ReasonChildFinished
	case "deadline":
		return lifecycle.ReasonDeadline
	case "recovered":
		return lifecycle.ReasonRecovered
	case "moved":
		return lifecycle.ReasonMoved
	case "retry":
		return lifecycle.ReasonRetry
	case "woken while running":
		return lifecycle.ReasonWokenWhileRunning
	}
	r, _ := lifecycle.ParseReason(text) // the wire's names; unspecified otherwise
	return r
}

// wireReason and fromWire convert a typed reason for actorspb.Wake.
func wireReason(r lifecycle.Reason) actorspb.WakeReason { return actorspb.WakeReason(r) }

func fromWire(r actorspb.WakeReason) lifecycle.Reason { return lifecycle.Reason(r) }
