package events

import (
	"fmt"
	"slices"

	"github.com/cairn-agents/cairn/runtime"
)

// A response's call journal is listed whole once, by the commit that
// journals the response; every later revision of the same response lists
// only the calls it changed (Checkpoint.CallsAt), without their arguments.
// A response of n calls then costs O(n) bytes in all, where a whole
// listing in every revision cost O(n²) (1,000 run_js calls: 99 KB of
// stream per call, docs/performance.md W2). The functions below are the one definition of that
// encoding, for the stores that write it and every reader that folds it.

// CallDelta returns cur as the calls it changed from prev and their
// indices: ok is false when cur is not prev with some states and result
// IDs changed (another response, another length, another call's ID, name
// or arguments), and cur must be listed whole. The changed calls carry no
// arguments: those are prev's.
func CallDelta(prev, cur []runtime.CallRecord) (changed []runtime.CallRecord, at []int, ok bool) {
	if len(prev) != len(cur) || len(cur) == 0 {
		return nil, nil, false
	}
	for i := range cur {
		p, c := &prev[i], &cur[i]
		if p.ID != c.ID || p.Name != c.Name || p.Args != c.Args {
			return nil, nil, false
		}
		if p.State != c.State || p.ResultID != c.ResultID {
			changed = append(changed, runtime.CallRecord{ID: c.ID, Name: c.Name, State: c.State, ResultID: c.ResultID})
			at = append(at, i)
		}
	}
	return changed, at, true
}

// ApplyCalls returns prev with the changes CallDelta made of it (a new
// slice; prev is not modified). It fails, ErrMalformed, on changes that do
// not fit prev: an index out of range or out of order, or a call whose ID
// or name is not the one at its index.
func ApplyCalls(prev, changed []runtime.CallRecord, at []int) ([]runtime.CallRecord, error) {
	if len(changed) != len(at) {
		return nil, fmt.Errorf("%w: %d changed calls at %d indices", ErrMalformed, len(changed), len(at))
	}
	out := slices.Clone(prev)
	last := -1
	for k, i := range at {
		if i <= last || i >= len(out) {
			return nil, fmt.Errorf("%w: changed call index %d (after %d) in a journal of %d calls", ErrMalformed, i, last, len(out))
		}
		last = i
		c := changed[k]
		if c.ID != out[i].ID || c.Name != out[i].Name {
			return nil, fmt.Errorf("%w: changed call %d is %s %q, the journal's is %s %q", ErrMalformed, i, c.Name, c.ID, out[i].Name, out[i].ID)
		}
		out[i].State, out[i].ResultID = c.State, c.ResultID
	}
	return out, nil
}

// ListsCalls reports whether p lists its journal whole (or has none),
// rather than the changes from the revision before it.
func (p *Checkpoint) ListsCalls() bool { return p.CallsBaseRev == 0 }

// check reports what is wrong with p's bases: each must name an earlier
// revision of the run, and changed calls need their indices.
func (p *Checkpoint) check() error {
	rev := p.Checkpoint.Revision
	switch {
	case p.UsedCallIDsBase > 0 && (p.UsedCallIDsBaseRev <= 0 || p.UsedCallIDsBaseRev >= rev):
		return fmt.Errorf("%w: used call IDs based on revision %d, not an earlier one than %d", ErrMalformed, p.UsedCallIDsBaseRev, rev)
	case p.CallsBaseRev != 0 && (p.CallsBaseRev < 0 || p.CallsBaseRev >= rev):
		return fmt.Errorf("%w: calls based on revision %d, not an earlier one than %d", ErrMalformed, p.CallsBaseRev, rev)
	case p.CallsBaseRev == 0 && (len(p.CallsAt) > 0 || p.CallsBase > 0):
		return fmt.Errorf("%w: call changes without a base revision", ErrMalformed)
	case len(p.CallsAt) != len(p.Checkpoint.Calls) && p.CallsBaseRev != 0:
		return fmt.Errorf("%w: %d changed calls at %d indices", ErrMalformed, len(p.Checkpoint.Calls), len(p.CallsAt))
	}
	return nil
}

// DecodeCheckpoint decodes the payload of a CheckpointCommitted envelope
// (inline: resolve an object-store reference first) and checks its bases.
// The checkpoint is as the event lists it: its used call IDs and calls may
// be those added or changed since a base (a Folder makes it whole).
func DecodeCheckpoint(e Envelope) (*Checkpoint, error) {
	if e.Type != CheckpointCommitted {
		return nil, fmt.Errorf("%w: %s where a checkpoint was expected", ErrMalformed, e.Type)
	}
	var p Checkpoint
	if err := e.Payload(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Folder makes whole checkpoints of the checkpoint events of a log read
// in order (a session's, a stream's): each run's used call IDs on top of
// their full listing, its calls on top of the revision before. It keeps
// per run the last full listing of used call IDs and the last journal; a
// reader that follows many runs Forgets each once it has ended.
type Folder struct {
	runs map[string]*folded
}

type folded struct {
	rev      int64
	listed   int64 // the revision that listed calls whole last
	calls    []runtime.CallRecord
	listings map[int64][]string // full listings of used call IDs, by revision
}

// NewFolder returns a Folder that has seen nothing.
func NewFolder() *Folder { return &Folder{runs: map[string]*folded{}} }

// ErrNoBase is a checkpoint that builds on a revision the Folder has not
// seen (a log read from its middle, or a gap in it).
var ErrNoBase = fmt.Errorf("%w: a base the reader has not seen", ErrMalformed)

// Whole returns run's checkpoint p with every used call ID and the whole
// journal. p is not modified. The run's checkpoints must come in revision
// order; one whose base was not seen is ErrNoBase.
func (f *Folder) Whole(runID string, p *Checkpoint) (*runtime.Checkpoint, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	r := f.runs[runID]
	if r == nil {
		r = &folded{listings: map[int64][]string{}}
		f.runs[runID] = r
	}
	cp := p.Checkpoint
	if p.UsedCallIDsBase > 0 {
		base, ok := r.listings[p.UsedCallIDsBaseRev]
		if !ok {
			return nil, fmt.Errorf("%w: run %s revision %d: used call IDs on revision %d", ErrNoBase, runID, cp.Revision, p.UsedCallIDsBaseRev)
		}
		cp.UsedCallIDs = append(slices.Clip(base), cp.UsedCallIDs...)
	}
	if !p.ListsCalls() {
		if r.rev != cp.Revision-1 {
			return nil, fmt.Errorf("%w: run %s revision %d: calls on revision %d, the last seen is %d", ErrNoBase, runID, cp.Revision, cp.Revision-1, r.rev)
		}
		if r.listed != p.CallsBaseRev {
			return nil, fmt.Errorf("%w: run %s revision %d: calls on the listing at revision %d, the last listing is at %d", ErrMalformed, runID, cp.Revision, p.CallsBaseRev, r.listed)
		}
		calls, err := ApplyCalls(r.calls, cp.Calls, p.CallsAt)
		if err != nil {
			return nil, fmt.Errorf("run %s revision %d: %w", runID, cp.Revision, err)
		}
		cp.Calls = calls
	} else {
		r.listed = cp.Revision
	}
	// Only a checkpoint made whole changes what the Folder keeps.
	if p.UsedCallIDsBase == 0 {
		r.listings[cp.Revision] = cp.UsedCallIDs
	}
	r.rev, r.calls = cp.Revision, cp.Calls
	return &cp, nil
}

// Forget drops what the Folder keeps of a run.
func (f *Folder) Forget(runID string) { delete(f.runs, runID) }
