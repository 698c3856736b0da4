package projections

import (
	"encoding/json"
	"sort"
	"strconv"
	"sync"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime/model"
)

// RunUsage is what one run used, as the log records it.
type RunUsage struct {
	RunID     string `json:"run_id"`
	RootRunID string `json:"root_run_id,omitempty"`
	// Steps are the model responses committed (the checkpoint's Step).
	Steps int `json:"steps"`
	// Commits are the checkpoint revisions committed.
	Commits int `json:"commits"`
	// ToolCalls are the calls journaled.
	ToolCalls int `json:"tool_calls"`
	// Compactions are the session compactions this run made.
	Compactions int `json:"compactions"`
	// Attempts are the leases taken on the run (1 + restarts).
	Attempts int `json:"attempts"`
	// Tokens are what the provider reported for the committed responses
	// (each response commit carries its usage).
	Tokens model.Usage `json:"tokens"`
}

// Usage is the usage read model: steps, commits, calls, compactions,
// attempts and tokens per run, rolled up per root run. Tokens here are
// those of committed responses, as the log proves them; the node's budget
// (C34: a root's entry in the budgets bucket, recorded before the commit,
// or, for a root with no subagents, the totals its commits carry and their
// side entry) also counts compaction summaries and failed requests (and,
// in the bucket, a response lost to a crash before its commit), so it can
// be higher, and it is what budgets are charged on.
type Usage struct {
	mu   sync.RWMutex
	runs map[string]*RunUsage
}

// NewUsage returns an empty usage model.
func NewUsage() *Usage { return &Usage{runs: map[string]*RunUsage{}} }

var _ Projection = (*Usage)(nil)

// Name implements Projection.
func (u *Usage) Name() string { return "usage" }

// Filters implements Projection.
func (u *Usage) Filters() []string {
	return []string{events.AllCreated, events.AllLeases, events.AllCheckpoints, events.AllCompactions}
}

func (u *Usage) run(id string) *RunUsage {
	r := u.runs[id]
	if r == nil {
		r = &RunUsage{RunID: id, RootRunID: id}
		u.runs[id] = r
	}
	return r
}

// Apply implements Projection.
func (u *Usage) Apply(e Event) error {
	if e.RunID == "" {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch e.Type {
	case events.RunCreated:
		var p events.Run
		if e.Payload(&p) == nil && p.RootRunID != "" {
			u.run(e.RunID).RootRunID = p.RootRunID
		}
	case events.LeaseAcquired:
		u.run(e.RunID).Attempts++
	case events.WindowCompacted:
		u.run(e.RunID).Compactions++
	case events.CheckpointCommitted:
		cp, err := e.Checkpoint()
		if err != nil {
			return nil
		}
		r := u.run(e.RunID)
		r.Commits++
		if cp.Usage != nil {
			r.Tokens = r.Tokens.Add(*cp.Usage)
		}
		if cp.Step > r.Steps {
			r.Steps = cp.Step
		}
		// A response commit is the one whose first call is its
		// predispatch: count each journal once, when it appears.
		if len(cp.Calls) > 0 && cp.ResponseID == messageIDAt(cp.RunKey, cp.Revision) {
			r.ToolCalls += len(cp.Calls)
		}
	}
	return nil
}

// messageIDAt is the ID the runtime gives the first message appended at
// revision rev: a response commit's assistant message.
func messageIDAt(key string, rev int64) string {
	return key + "-" + strconv.FormatInt(rev, 10) + "-0"
}

// Snapshot implements Projection.
func (u *Usage) Snapshot() ([]byte, error) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return json.Marshal(u.runs)
}

// Restore implements Projection.
func (u *Usage) Restore(b []byte) error {
	runs := map[string]*RunUsage{}
	if err := json.Unmarshal(b, &runs); err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.runs = runs
	return nil
}

// Run returns one run's usage.
func (u *Usage) Run(runID string) (RunUsage, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	r, ok := u.runs[runID]
	if !ok {
		return RunUsage{}, false
	}
	return *r, true
}

// RootUsage is a root run's usage with all its descendants.
type RootUsage struct {
	RootRunID   string      `json:"root_run_id"`
	Runs        []string    `json:"runs"`
	Steps       int         `json:"steps"`
	Commits     int         `json:"commits"`
	ToolCalls   int         `json:"tool_calls"`
	Compactions int         `json:"compactions"`
	Attempts    int         `json:"attempts"`
	Tokens      model.Usage `json:"tokens"`
}

// Root rolls up every run that draws on root's budget.
func (u *Usage) Root(root string) RootUsage {
	u.mu.RLock()
	defer u.mu.RUnlock()
	out := RootUsage{RootRunID: root, Runs: []string{}}
	for _, r := range u.runs {
		if r.RootRunID != root {
			continue
		}
		out.Runs = append(out.Runs, r.RunID)
		out.Steps += r.Steps
		out.Commits += r.Commits
		out.ToolCalls += r.ToolCalls
		out.Compactions += r.Compactions
		out.Attempts += r.Attempts
		out.Tokens = out.Tokens.Add(r.Tokens)
	}
	sort.Strings(out.Runs)
	return out
}
