package actors

import "github.com/asynkron/protoactor-go/cluster"

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

// WithActiveKV returns cfg for a node that also writes the active set of
// earlier builds (bucket cairn_active), as a node does while one of their
// members is in its cluster: the tests of that set run against it.
func WithActiveKV(cfg Config) Config {
	cfg.activeKV = true
	return cfg
}
