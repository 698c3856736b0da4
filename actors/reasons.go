package actors

import (
	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/actors/lifecycle"
)

// wireReason and fromWire convert a typed reason for actorspb.Wake.
func wireReason(r lifecycle.Reason) actorspb.WakeReason { return actorspb.WakeReason(r) }

func fromWire(r actorspb.WakeReason) lifecycle.Reason { return lifecycle.Reason(r) }
