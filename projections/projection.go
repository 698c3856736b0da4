package projections

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// Event is one decoded event of the log with its place in the stream.
type Event struct {
	// Seq is the event's stream sequence: a projection's position.
	Seq uint64
	// Subject is the NATS subject it was published on (it tells a
	// completed commit, .c.done, from a step, .c.step).
	Subject string
	events.Envelope
}

// Completed reports whether the event is a run's completed commit.
func (e Event) Completed() bool {
	s, err := events.ParseSubject(e.Subject)
	return err == nil && s.Kind == events.KindDone
}

// Checkpoint decodes the payload of a CheckpointCommitted event. The
// payload must be inline (the runner resolves object-store references
// before Apply). Its UsedCallIDs and Calls are those the event lists: on
// a base (events.Checkpoint.UsedCallIDsBase), only the IDs added since;
// after a response's commit (events.Checkpoint.CallsBaseRev), only the
// calls this revision changed, without arguments. A replay History, and
// an events.Folder fed the log in order, have them whole.
func (e Event) Checkpoint() (*runtime.Checkpoint, error) {
	if e.Type != events.CheckpointCommitted {
		return nil, fmt.Errorf("projections: seq %d: %s is not a checkpoint", e.Seq, e.Type)
	}
	var p events.Checkpoint
	if err := e.Payload(&p); err != nil {
		return nil, fmt.Errorf("projections: seq %d: %w", e.Seq, err)
	}
	return &p.Checkpoint, nil
}

// Projection is a read model built from the log. The runner hands it every
// event matching Filters, in stream order, each at most once per life of
// the projection's state: Apply never sees a sequence at or below the
// position it was restored at. Apply must be deterministic (no clock, no
// randomness, no map order in its state's encoding), so that a projection
// rebuilt from sequence 1 equals one that followed the log live across
// restarts.
//
// Apply must not fail on an event it does not understand: a read model
// skips it (and may count it). An error from Apply is a broken invariant
// of the projection itself; the runner stops on it.
type Projection interface {
	// Name identifies the projection: its durable consumer and the key of
	// its saved state. Letters, digits, _ and - only.
	Name() string
	// Filters are the subjects it consumes.
	Filters() []string
	// Apply applies one event.
	Apply(e Event) error
	// Snapshot encodes the state (deterministically: equal states give
	// equal bytes).
	Snapshot() ([]byte, error)
	// Restore replaces the state with a snapshot.
	Restore(b []byte) error
}

// ErrBadName is returned for a projection name that cannot name a consumer
// or a key.
var ErrBadName = errors.New("projections: bad projection name")

func checkName(name string) error {
	if err := events.ValidID(name); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadName, name, err)
	}
	return nil
}

// state is what the runner saves for a projection: its position and its
// snapshot, together, so a restart resumes exactly after Seq.
type state struct {
	Seq      uint64          `json:"seq"`
	Snapshot json.RawMessage `json:"snapshot"`
	// Consumer is the durable consumer positioned after Seq (the runner's).
	Consumer string `json:"consumer,omitempty"`
}
