// Package cluster is the membership of Cairn nodes on NATS: a protoactor-go
// ClusterProvider backed by a JetStream KV bucket, so nodes that share a
// NATS (cluster) form one protoactor-go cluster with nothing else to run.
//
// # How membership works
//
//  1. Every member creates its entry (key: its actor system ID; value: its
//     address and kinds) and refreshes it every Heartbeat with a
//     compare-and-set on its own revision.
//  2. The bucket has a TTL and limit markers (LimitMarkerTTL): an entry not
//     refreshed within the TTL is removed by the server, which writes a
//     marker that every watcher sees. That, and a graceful delete, are the
//     only ways a member leaves the list.
//  3. Every member watches the bucket and pushes the COMPLETE member list to
//     protoactor-go (MemberList.UpdateClusterTopology) on every change and
//     every Resync. protoactor-go blocks a member that left for good, so a
//     transient error (a failed watch, a failed heartbeat) never removes
//     anyone: the last complete list stands until the bucket says otherwise.
//  4. A member whose own entry expired while it lived on (a long pause, a
//     partition) is expelled: Expelled is closed, and the node must start a
//     new member under a new ID (the old one is blocked everywhere).
//  5. Shutdown deletes the entry first, so the others move its actors at
//     once. protoactor-go's Cluster.Shutdown(false) never calls the
//     provider's Shutdown: call it yourself.
//
// # A minimal program
//
//	kv, _ := cluster.Bucket(ctx, js, cluster.BucketConfig{TTL: 6 * time.Second})
//	p, _ := cluster.NewProvider(cluster.Config{KV: kv, TTL: 6 * time.Second})
//	ccfg := pcluster.Configure("cairn", p, disthash.New(), remote.Configure("127.0.0.1", 0))
//	c := pcluster.New(actor.NewActorSystem(), ccfg)
//	c.StartMember()
//	defer func() { _ = p.Shutdown(true); c.Shutdown(false) }()
package cluster
