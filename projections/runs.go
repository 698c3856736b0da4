package projections

import (
	"bytes"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// RunEntry is one run in the run index.
type RunEntry struct {
	RunID        string             `json:"run_id"`
	SessionID    string             `json:"session_id"`
	Agent        string             `json:"agent,omitempty"`
	Owner        string             `json:"owner,omitempty"`
	ParentRunID  string             `json:"parent_run_id,omitempty"`
	ParentCallID string             `json:"parent_call_id,omitempty"`
	RootRunID    string             `json:"root_run_id,omitempty"`
	Continues    string             `json:"continues,omitempty"`
	Status       runtime.CallStatus `json:"status"`
	Error        string             `json:"error,omitempty"`
	// Node is the holder of the run's latest lease (the node that runs or
	// last ran it) and Epoch that lease's epoch.
	Node    string    `json:"node,omitempty"`
	Epoch   int64     `json:"epoch,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Purged is when the run's session was purged (Status is then
	// purged), and EndedAs how the run had ended before.
	Purged  time.Time          `json:"purged,omitzero"`
	EndedAs runtime.CallStatus `json:"ended_as,omitempty"`
	// Definition is the definition version the run was admitted under
	// (events.Run.Definition); "" for a run of an earlier build.
	Definition string `json:"definition,omitempty"`
	// UpgradedFrom is the version the run ran under before an operator
	// moved it to Definition (events.RunUpgraded); it takes Definition at
	// its next model boundary.
	UpgradedFrom string `json:"upgraded_from,omitempty"`
}

// Runs is the run index: every run with its agent, owner, parent,
// session, status, timestamps and owner node. It reads run creations,
// leases, commits and ends; of a step commit only whether it dispatches
// wait_calls (the run is waiting), decoding only the few that name the
// tool, which keeps a rebuild cheap (the runner reads every event of the
// log anyway: BenchmarkRebuild).
type Runs struct {
	mu   sync.RWMutex
	runs map[string]*RunEntry
	// onEnd is told of each run's end as the index applies it.
	onEnd func(RunEntry)
}

// OnEnd has f told of each run that ends (completed, needs_input, failed,
// cancelled) from now on, once per run, with its entry as it ended: from
// its Created to its Updated is its duration by the log's own times. f
// runs after the index is updated, outside the index's lock but within
// Apply (under a Runner, within its delivery): it must not block. Set it
// before the index is fed.
func (ix *Runs) OnEnd(f func(RunEntry)) { ix.onEnd = f }

// waitTool is the wait tool's name as a commit's JSON spells it.
var waitTool = []byte(`"` + runtime.ToolWait + `"`)

// waits reports whether a step commit dispatches wait_calls.
func waits(e Event) bool {
	cp, err := e.Checkpoint()
	if err != nil {
		return false
	}
	for _, c := range cp.Calls {
		if c.Name == runtime.ToolWait && c.State == runtime.CallDispatching {
			return true
		}
	}
	return false
}

// NewRuns returns an empty run index.
func NewRuns() *Runs { return &Runs{runs: map[string]*RunEntry{}} }

var _ Projection = (*Runs)(nil)

// Name implements Projection.
func (ix *Runs) Name() string { return "runindex" }

// Filters implements Projection.
func (ix *Runs) Filters() []string {
	return []string{
		events.AllCreated, events.AllLeases,
		events.AllCheckpoints, events.AllEnded, events.AllPurged, events.AllUpgraded,
	}
}

func (ix *Runs) entry(e Event) *RunEntry {
	en := ix.runs[e.RunID]
	if en == nil {
		en = &RunEntry{RunID: e.RunID, SessionID: e.SessionID, Status: runtime.StatusRunning, Created: e.Time}
		ix.runs[e.RunID] = en
	}
	return en
}

// Apply implements Projection.
func (ix *Runs) Apply(e Event) error {
	if e.Type == events.SessionPurged {
		ix.purge(e)
		return nil
	}
	if e.RunID == "" {
		return nil
	}
	ended := ix.apply(e)
	if ended != nil && ix.onEnd != nil {
		ix.onEnd(*ended)
	}
	return nil
}

// apply applies e; it returns the run's entry when e ended the run.
func (ix *Runs) apply(e Event) (ended *RunEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	switch e.Type {
	case events.RunCreated:
		var r events.Run
		if e.Payload(&r) != nil {
			return nil
		}
		en := ix.entry(e)
		en.Agent, en.Owner, en.ParentRunID, en.ParentCallID, en.RootRunID, en.Continues = r.Agent, r.Owner, r.ParentRunID, r.ParentCallID, r.RootRunID, r.Continues
		en.Definition = r.Definition
		en.Created, en.Updated = e.Time, e.Time
	case events.RunUpgraded:
		var u events.Upgrade
		if e.Payload(&u) != nil {
			return nil
		}
		// The version it moves to, at its next model boundary.
		en := ix.entry(e)
		en.Definition, en.UpgradedFrom, en.Updated = u.To, u.From, e.Time
	case events.LeaseAcquired:
		var l events.Lease
		if e.Payload(&l) != nil {
			return nil
		}
		en := ix.entry(e)
		en.Node, en.Epoch, en.Updated = l.Holder, l.Epoch, e.Time
	case events.CheckpointCommitted:
		if !e.Completed() {
			// A step: the run waits for its children while its latest
			// commit dispatches wait_calls, and runs again with the next.
			// Most commits do not name the tool at all: only those are
			// decoded (a rebuild reads every commit).
			en := ix.entry(e)
			if !en.Status.Active() {
				return nil
			}
			st := runtime.StatusRunning
			if e.DataRef == nil && bytes.Contains(e.Data, waitTool) && waits(e) {
				st = runtime.StatusWaiting
			}
			en.Status, en.Updated = st, e.Time
			return nil
		}
		{
			en := ix.entry(e)
			st := runtime.StatusCompleted
			if cp, err := e.Checkpoint(); err == nil {
				st = runtime.RunStatus(st, cp.Reply)
			}
			if en.Status.Active() {
				ended = en
			}
			en.Status, en.Error, en.Updated = st, "", e.Time
		}
	case events.RunEnded:
		var end events.Ended
		if e.Payload(&end) != nil {
			return nil
		}
		if en := ix.entry(e); en.Status.Active() {
			en.Status, en.Error, en.Updated = runtime.CallStatus(end.Status), end.Reason, e.Time
			ended = en
		}
	}
	if ended != nil {
		c := *ended
		return &c
	}
	return nil
}

// purge marks the runs a session's purge marker lists as purged, making
// the entries of those the index never saw (a rebuild after the purge: the
// runs' own events are gone) from the marker. A purged run ended before;
// its end was told (OnEnd) when the index applied it, if it did.
func (ix *Runs) purge(e Event) {
	var p events.Purge
	if e.Payload(&p) != nil {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, r := range p.Runs {
		en := ix.runs[r.RunID]
		if en == nil {
			en = &RunEntry{RunID: r.RunID, SessionID: e.SessionID, Agent: r.Agent, Owner: r.Owner, ParentRunID: r.ParentRunID,
				ParentCallID: r.ParentCallID, RootRunID: r.RootRunID, Continues: r.Continues, Created: r.Created, Updated: r.Ended}
			ix.runs[r.RunID] = en
		}
		if en.Status != runtime.StatusPurged {
			en.EndedAs = runtime.CallStatus(r.Status)
		}
		en.Status, en.Purged = runtime.StatusPurged, e.Time
	}
}

// Finished returns the sessions every run of which has ended (none is
// purged), the last end at or before cutoff(agent) for their agent (an
// agent whose cutoff is not ok keeps its sessions: none is returned), and
// no run still active below them: a session holding the parent or the
// root of an active run is not finished, since the run may still deliver
// to its parent or draw on its root's budget. These are the candidates of
// a retention sweep, which reads each from the log before it purges it.
// The index applies the log in order, so a run's end it holds comes after
// the creation of every child the run had.
func (ix *Runs) Finished(cutoff func(agent string) (time.Time, bool)) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	open := map[string]bool{}
	for _, e := range ix.runs {
		switch {
		case e.Status.Active():
			open[e.SessionID] = true
			for _, up := range []string{e.ParentRunID, e.RootRunID} {
				if p := ix.runs[up]; up != "" && p != nil {
					open[p.SessionID] = true
				}
			}
		case e.Status == runtime.StatusPurged:
			open[e.SessionID] = true
		case !open[e.SessionID]:
			before, ok := cutoff(e.Agent)
			open[e.SessionID] = !ok || e.Updated.After(before)
		}
	}
	var out []string
	for s, o := range open {
		if !o {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// PurgedSessions returns the sessions whose runs are purged.
func (ix *Runs) PurgedSessions() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, e := range ix.runs {
		if e.Status == runtime.StatusPurged && !seen[e.SessionID] {
			seen[e.SessionID] = true
			out = append(out, e.SessionID)
		}
	}
	sort.Strings(out)
	return out
}

// Snapshot implements Projection.
func (ix *Runs) Snapshot() ([]byte, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return json.Marshal(ix.runs)
}

// Restore implements Projection.
func (ix *Runs) Restore(b []byte) error {
	runs := map[string]*RunEntry{}
	if err := json.Unmarshal(b, &runs); err != nil {
		return err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.runs = runs
	return nil
}

// Get returns one run.
func (ix *Runs) Get(runID string) (RunEntry, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.runs[runID]
	if !ok {
		return RunEntry{}, false
	}
	return *e, true
}

// Len is the number of runs indexed.
func (ix *Runs) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.runs)
}

// List returns the runs of owner ("" for all), newest first; roots only
// unless children is set.
func (ix *Runs) List(owner string, children bool) []RunEntry {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := []RunEntry{}
	for _, e := range ix.runs {
		if (owner == "" || e.Owner == owner) && (children || e.ParentRunID == "") {
			out = append(out, *e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].RunID < out[j].RunID
	})
	return out
}

// VersionUse is how many runs of one agent name one definition version:
// Active those not ended yet (running, waiting, parked), Kept those the
// log still holds (every one not purged).
type VersionUse struct {
	Active int `json:"active"`
	Kept   int `json:"kept"`
}

// Versions counts the runs of owner ("" for all) by agent and definition
// version; runs that name no version (an earlier build's) count under "".
func (ix *Runs) Versions(owner string) map[string]map[string]VersionUse {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := map[string]map[string]VersionUse{}
	for _, e := range ix.runs {
		if e.Status == runtime.StatusPurged || owner != "" && e.Owner != owner || e.Agent == "" {
			continue
		}
		byVersion := out[e.Agent]
		if byVersion == nil {
			byVersion = map[string]VersionUse{}
			out[e.Agent] = byVersion
		}
		u := byVersion[e.Definition]
		u.Kept++
		if e.Status.Active() {
			u.Active++
		}
		byVersion[e.Definition] = u
	}
	return out
}

// Definitions returns every definition version a run the log still holds
// names: its own, and the one it was upgraded from (its last checkpoint
// may still be under it). Retention keeps these (actors.Node.PruneVersions).
func (ix *Runs) Definitions() map[string]bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := map[string]bool{}
	for _, e := range ix.runs {
		if e.Status == runtime.StatusPurged {
			continue
		}
		for _, d := range []string{e.Definition, e.UpgradedFrom} {
			if d != "" {
				out[d] = true
			}
		}
	}
	return out
}

// Counts returns the number of runs by status.
func (ix *Runs) Counts() map[runtime.CallStatus]int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := map[runtime.CallStatus]int{}
	for _, e := range ix.runs {
		out[e.Status]++
	}
	return out
}
