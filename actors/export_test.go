package actors

import "github.com/asynkron/protoactor-go/cluster"

// SetPendingHook sets the hook a wake calls when it finds the run's
// attempt running; the returned function clears it. Set it before a node
// starts, clear it after it is closed.
func SetPendingHook(pending func(runID string)) (clear func()) {
	testHookPending = pending
	return func() { testHookPending = nil }
}

// OnActorStopped calls f with the identity (session.run) of each run actor
// of the node's current member that stops: passivated, finished, stopped
// or moved. It is told after the actor's last message was handled, so a
// test waits on it instead of polling LiveRuns. f must not block; the
// returned function unsubscribes.
func (n *Node) OnActorStopped(f func(identity string)) (unsubscribe func()) {
	es := n.current().system.EventStream
	sub := es.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ActivationTerminated); ok && t.ClusterIdentity.GetKind() == runKind {
			f(t.ClusterIdentity.GetIdentity())
		}
	})
	return func() { es.Unsubscribe(sub) }
}
