package actors

import (
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/actors/lifecycle"
)

// TestWakeReasonsMatchTheCore: the wire's WakeReason and the core's Reason
// have the same names and numbers, so a reason crosses members unchanged.
func TestWakeReasonsMatchTheCore(t *testing.T) {
	core := lifecycle.Reasons()
	if len(core) != len(actorspb.WakeReason_name) {
		t.Fatalf("the core has %d reasons, the wire %d", len(core), len(actorspb.WakeReason_name))
	}
	for _, r := range core {
		name, ok := actorspb.WakeReason_name[int32(r)]
		if !ok {
			t.Fatalf("reason %s (%d) is not on the wire", r, r)
		}
		want := "WAKE_REASON_" + strings.ToUpper(strings.ReplaceAll(r.String(), "-", "_"))
		if name != want {
			t.Errorf("reason %d: wire %s, core %s", r, name, want)
		}
		if fromWire(wireReason(r)) != r {
			t.Errorf("reason %s does not survive the wire", r)
		}
	}
}
