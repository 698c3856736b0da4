package projections

import (
	"encoding/json"
	"fmt"
)

// Follower applies events to a projection at most once each, by stream
// sequence, and saves the projection's position with its state. The
// runner drives one per projection; tests and tools drive one directly
// over any sequence of events (a rebuild is a new Follower fed from
// sequence 1).
type Follower struct {
	p   Projection
	seq uint64
	// consumer is the runner's durable consumer, saved with the state.
	consumer string
}

// NewFollower returns a follower of p at position 0 (p's state is
// whatever it holds; a fresh projection for a rebuild).
func NewFollower(p Projection) *Follower { return &Follower{p: p} }

// Projection returns the followed projection.
func (f *Follower) Projection() Projection { return f.p }

// Seq is the last stream sequence applied.
func (f *Follower) Seq() uint64 { return f.seq }

// Offer applies e unless its sequence is at or below the position (a
// redelivery after a restart, or a duplicate): that is what makes applying
// idempotent whatever the projection does. It reports whether e was
// applied.
func (f *Follower) Offer(e Event) (bool, error) {
	if e.Seq <= f.seq {
		return false, nil
	}
	if err := f.p.Apply(e); err != nil {
		return false, fmt.Errorf("projections: %s: apply seq %d: %w", f.p.Name(), e.Seq, err)
	}
	f.seq = e.Seq
	return true, nil
}

// Skip moves the position past a sequence the projection does not consume
// (an event that could not be decoded, or one another filter matched).
func (f *Follower) Skip(seq uint64) {
	if seq > f.seq {
		f.seq = seq
	}
}

// Save encodes the position and the state together.
func (f *Follower) Save() ([]byte, error) {
	snap, err := f.p.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("projections: %s: snapshot: %w", f.p.Name(), err)
	}
	return json.Marshal(state{Seq: f.seq, Snapshot: snap, Consumer: f.consumer})
}

// Load restores a saved position and state.
func (f *Follower) Load(b []byte) error {
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("projections: %s: saved state: %w", f.p.Name(), err)
	}
	if err := f.p.Restore(s.Snapshot); err != nil {
		return fmt.Errorf("projections: %s: restore: %w", f.p.Name(), err)
	}
	f.seq, f.consumer = s.Seq, s.Consumer
	return nil
}
