package jsexec

import "testing"

// reasonAtInterrupt is a VM that records, when it is interrupted, the
// reason the watchdog gives at that moment: the VM may unwind and the
// script's end read it (realm.fail) at once.
type reasonAtInterrupt struct {
	w    *watchdog
	seen *stop
}

func (r *reasonAtInterrupt) Interrupt(any) { r.seen = r.w.reason() }

// A script the watchdog stops finds the reason as soon as it is
// interrupted. Before, fire interrupted first and published the reason
// after: a script that unwound in between was reported as "the script was
// interrupted" (an exception) instead of the limit it hit (TestLimits'
// memory case failed so under load, in fresh-clone-check).
func TestStoppedScriptFindsItsReason(t *testing.T) {
	vm := &reasonAtInterrupt{}
	w := &watchdog{vm: vm, fired: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{})}
	vm.w = w
	w.fire(stop{kind: "limit", msg: "memory limit exceeded"})
	if vm.seen == nil || vm.seen.kind != "limit" {
		t.Fatalf("at the interrupt the reason was %v, want the limit", vm.seen)
	}
}
