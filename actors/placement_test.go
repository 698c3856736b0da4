package actors

import (
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/cairn-agents/cairn/actors/sweep"
)

// TestSweepPlacementIsDisthash: the sweep places runs (sweep.Place) where
// protoactor-go's disthash places their actors (cluster.Rendezvous), on
// every topology size: a sweep that disagreed would wake runs it does not
// own, or leave its own asleep.
func TestSweepPlacementIsDisthash(t *testing.T) {
	for _, size := range []int{1, 2, 3, 5, 8} {
		var members cluster.Members
		var ours []sweep.Member
		for i := range size {
			m := &cluster.Member{Id: fmt.Sprintf("node%d-%x", i, i*7919), Host: fmt.Sprintf("127.0.0.%d", 1+i%3), Port: int32(40000 + i*13), Kinds: []string{runKind}}
			members = append(members, m)
			ours = append(ours, sweep.Member{ID: m.Id, Addr: m.Address()})
		}
		rdv := cluster.NewRendezvous()
		rdv.UpdateMembers(members)
		place := sweep.Place(ours)
		for i := range 5000 {
			id := identity(fmt.Sprintf("s%016x", i*104729), fmt.Sprintf("r%016x", i))
			want := rdv.GetByClusterIdentity(&cluster.ClusterIdentity{Identity: id, Kind: runKind})
			if got := place.Owner(id); got != want {
				t.Fatalf("%d members, %s: sweep places it on %s, disthash on %s", size, id, got, want)
			}
		}
	}
}
