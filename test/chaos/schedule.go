package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds.
const (
	// KillNode is kill -9 of a node; it is started again after Hold.
	KillNode Kind = "kill"
	// KillStarting is kill -9 of a node, a restart after Hold, and a second
	// kill -9 After into that start (most often before the node is ready),
	// then a last restart.
	KillStarting Kind = "kill-starting"
	// PauseNode is SIGSTOP of a node for Hold, past the member TTL, then
	// SIGCONT (clusters only).
	PauseNode Kind = "pause"
	// RestartNATS is kill -9 of the external nats-server; it is started
	// again after Hold on the same port and store directory.
	RestartNATS Kind = "nats-restart"
	// FillDisk fills the filesystem of the target's data directory for Hold,
	// then frees it.
	FillDisk Kind = "disk-full"
)

// NATS is the Target of a fault on the external nats-server.
const NATS = -1

// Topology is what a schedule runs against.
type Topology struct {
	// Name names the topology in the test's output.
	Name string
	// Nodes is how many Cairn nodes run (1 or 3).
	Nodes int
	// ExternalNATS: the node uses a nats-server process of its own (--nats)
	// instead of its embedded server.
	ExternalNATS bool
	// MemberTTL is the nodes' --member-ttl; a pause lasts longer. Zero
	// outside a cluster.
	MemberTTL time.Duration
}

// Kinds lists the faults that apply to the topology, in a fixed order (the
// schedule draws from it, so the order is part of a seed's meaning).
func (t Topology) Kinds() []Kind {
	kinds := []Kind{KillNode, KillStarting}
	if t.Nodes > 1 {
		kinds = append(kinds, PauseNode)
	}
	if t.ExternalNATS {
		kinds = append(kinds, RestartNATS)
	}
	return append(kinds, FillDisk)
}

// Fault is one entry of a schedule.
type Fault struct {
	Kind Kind
	// Target is a node's index, or NATS.
	Target int
	// Gap is how long the schedule waits before the fault, counted from
	// the moment every process was ready again after the previous one.
	Gap time.Duration
	// Hold is how long the fault lasts: the time a killed process stays
	// down, a pause, a full disk.
	Hold time.Duration
	// After is, for KillStarting, how long into the restart the second
	// kill comes.
	After time.Duration
}

// TargetName is the process the fault hits: n1, n2, ... or nats.
func (f Fault) TargetName() string {
	if f.Target == NATS {
		return "nats"
	}
	return fmt.Sprintf("n%d", f.Target+1)
}

func (f Fault) String() string {
	switch f.Kind {
	case KillStarting:
		return fmt.Sprintf("after %v: %s of %s (down %v, killed again %v into its restart)", f.Gap, f.Kind, f.TargetName(), f.Hold, f.After)
	case PauseNode:
		return fmt.Sprintf("after %v: %s of %s for %v", f.Gap, f.Kind, f.TargetName(), f.Hold)
	case FillDisk:
		return fmt.Sprintf("after %v: %s of %s for %v", f.Gap, f.Kind, f.TargetName(), f.Hold)
	}
	return fmt.Sprintf("after %v: %s of %s (down %v)", f.Gap, f.Kind, f.TargetName(), f.Hold)
}

// startKillWithin bounds how long into a start KillStarting's second kill
// comes.
func startKillWithin(topo Topology) time.Duration {
	if topo.Nodes > 1 {
		return 5 * time.Second
	}
	return time.Second
}

// Plan derives n faults for the topology from seed. It is a pure function
// of its arguments: a seed printed by a failing test replays the same
// schedule.
func Plan(seed int64, topo Topology, n int) []Fault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x63686165)) // "chae": a fixed stream per seed
	between := func(lo, hi time.Duration) time.Duration {
		d := lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
		return d.Round(10 * time.Millisecond)
	}
	kinds := topo.Kinds()
	out := make([]Fault, 0, n)
	for range n {
		f := Fault{Kind: kinds[rng.IntN(len(kinds))], Target: rng.IntN(max(topo.Nodes, 1)), Gap: between(time.Second, 6*time.Second)}
		switch f.Kind {
		case KillNode:
			f.Hold = between(0, 3*time.Second)
		case KillStarting:
			f.Hold = between(0, time.Second)
			// On the development machine a lone node is ready about 1.1 s after
			// its start, a clustered one 7-15 s: a kill within 1 s (5 s) lands
			// in the start nearly every time.
			f.After = between(50*time.Millisecond, startKillWithin(topo))
		case PauseNode:
			f.Hold = topo.MemberTTL + between(time.Second, 9*time.Second)
		case RestartNATS:
			f.Target = NATS
			f.Hold = between(500*time.Millisecond, 5*time.Second)
		case FillDisk:
			if topo.ExternalNATS {
				// The node keeps nothing on its disk: the server's store fills.
				f.Target = NATS
			}
			f.Hold = between(2*time.Second, 10*time.Second)
		}
		out = append(out, f)
	}
	return out
}
