// Package sweep decides which of the active runs a member must wake: a
// pure function of the run facts it read, the topology and the time. The
// member (actors/member.go) reads the active set, the leases and the
// creation times, and performs the wakes; what to wake is decided here,
// where a table test can drive every case.
//
// A run is woken by its owner, the member rendezvous hashing places it on
// (as protoactor-go's disthash places its actor: Place reproduces it, and
// a test in actors checks the two agree), when nothing else would wake it:
//   - its lease holder is not a member (its member died, or this node
//     restarted under a new member ID);
//   - another live member has held its lease for two sweep intervals while
//     the run belongs here and has no actor here: a handoff that did not
//     arrive;
//   - it has no lease and is old enough that its creator's own wake would
//     have arrived (or this is the member's first sweep);
//   - it has no record (admitted, its creator died before writing it):
//     Settle, which its admission's grace decides, with nothing written;
//   - a topology change asked for a full sweep: every run it owns, since a
//     change is when a message can be lost.
package sweep

import (
	"hash/fnv"
	"slices"
	"strings"
	"time"
)

// Member is a member of the topology.
type Member struct {
	ID   string
	Addr string // host:port, what rendezvous hashes
}

// Placement places identities on members by rendezvous hashing.
type Placement struct {
	members []Member // by ID, descending: protoactor-go's order
}

// Place sorts the topology once, for many Owner calls.
func Place(members []Member) *Placement {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(b.ID, a.ID) })
	return &Placement{members: ms}
}

// Owner is the address of the member identity is placed on; "" with no
// member. It is protoactor-go's cluster.Rendezvous: FNV-1a 32 of the
// identity then the member's address, the highest score wins, the first
// member in ID-descending order on a tie, and a score of zero never wins.
func (p *Placement) Owner(identity string) string {
	switch len(p.members) {
	case 0:
		return ""
	case 1:
		return p.members[0].Addr
	}
	var best uint32
	owner := ""
	h := fnv.New32a()
	for _, m := range p.members {
		h.Reset()
		_, _ = h.Write([]byte(identity))
		_, _ = h.Write([]byte(m.Addr))
		if s := h.Sum32(); s > best {
			best, owner = s, m.Addr
		}
	}
	return owner
}

// Lease is what the log says of a run's lease.
type Lease struct {
	Holder string
	// At is when the lease was last taken or renewed (the server's time of
	// its message).
	At time.Time
}

// Run is what the member knows of one active run it owns.
type Run struct {
	// Local: an actor of the run lives on this member (it will act on its
	// own messages).
	Local bool
	// Lease is nil when the run has none yet (created, never activated).
	Lease *Lease
	// Created is the time of the run's creation record; zero when it has
	// none (admitted, its record not written yet: the creator may have
	// died in between) or could not be read.
	Created time.Time
	// CreatedUnknown: the creation record could not be read.
	CreatedUnknown bool
	// NoRecord: the log holds no creation record for the run: it was
	// admitted (its active-set entry comes first) and its record is not
	// written yet, or never will be (its creator died in between).
	NoRecord bool
}

// Sweep is one sweep's setting.
type Sweep struct {
	Self string // this member's ID
	// Live are the members' IDs in the topology.
	Live map[string]bool
	Now  time.Time
	// Interval is the sweep interval: a lease another member has held for
	// two of them is a handoff that did not arrive.
	Interval time.Duration
	// UnleasedGrace is how long a run may go without a lease before a
	// (non-first) sweep wakes it: its creator's wake is on its way.
	UnleasedGrace time.Duration
	// First: the member's first sweep (after a start or a rejoin): every
	// run without a lease is woken.
	First bool
	// Full: a topology change asked for every owned run to be woken.
	Full bool
}

// Verdict is the decision for one run.
type Verdict uint8

const (
	// Leave: something else will act on the run.
	Leave Verdict = iota
	// Wake: wake the run as recovered.
	Wake
	// NeedLease: the decision needs the run's lease and creation time;
	// read them and ask again (Decide with them). Returned for a run that
	// is not Local, so that a sweep reads the log only for runs it may
	// wake.
	NeedLease
	// Settle: the run has no record; there is nothing to attempt and
	// nothing to write. Its admission's grace decides: the entry stays
	// while a creation (or a client's retry with its idempotency key) may
	// still write the record, and leaves the active set after.
	Settle
)

// Decide decides for one run this member owns. With leaseRead false the
// run's Lease and Created are not known yet, and Decide answers Wake,
// Leave or NeedLease.
func (s Sweep) Decide(r Run, leaseRead bool) Verdict {
	if s.Full {
		// Local actors too: a parked one may be the run whose message the
		// change lost. A parked run's attempt re-reads its state and parks
		// again if nothing changed.
		return Wake
	}
	if r.Local {
		return Leave
	}
	if !leaseRead {
		return NeedLease
	}
	if l := r.Lease; l != nil {
		// Its holder lives: its next message finds it. Unless the holder
		// is another member that has held it for two intervals while the
		// run belongs here with no actor here: it took the run while the
		// topology moved, and the handoff did not arrive.
		if s.Live[l.Holder] && (l.Holder == s.Self || s.Now.Sub(l.At) < 2*s.Interval) {
			return Leave
		}
		return Wake
	}
	switch {
	case r.CreatedUnknown:
		return Leave // the next sweep reads it again
	case r.NoRecord:
		return Settle
	case s.First:
		return Wake
	case s.Now.Sub(r.Created) < s.UnleasedGrace:
		return Leave // its creator's wake is most likely on its way
	}
	return Wake
}
