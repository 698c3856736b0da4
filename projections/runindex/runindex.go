// Package runindex is the node's run index: projections.RunIndex kept in
// memory and rebuilt from sequence 1 at start by an ordered consumer
// (nothing left on the server), so a restart converges on exactly what the
// log says. A rebuild reads the log at close to the raw ordered-consumer
// rate (projections.BenchmarkRebuild), which is why the index keeps no
// saved state.
package runindex

import (
	"context"
	"fmt"
	"time"

	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
)

// Entry is one run.
type Entry = projections.RunEntry

// Index is the read model.
type Index struct {
	ix *projections.Runs
	r  *projections.Runner
}

// Hooks are what the index tells its user as it follows the log.
type Hooks struct {
	// OnEnd is told of each run's end (projections.Runs.OnEnd), those of
	// the rebuild at start included.
	OnEnd func(Entry)
}

// Start builds the index from the stream and keeps it current.
func Start(ctx context.Context, src projections.Source, hooks Hooks) (*Index, error) {
	ix := projections.NewRuns()
	if hooks.OnEnd != nil {
		ix.OnEnd(hooks.OnEnd)
	}
	r, err := projections.Start(ctx, projections.Config{JS: src.JS, Stream: src.Stream, Keys: src.Keys}, ix)
	if err != nil {
		return nil, fmt.Errorf("runindex: %w", err)
	}
	return &Index{ix: ix, r: r}, nil
}

// Close stops following the log.
func (ix *Index) Close(ctx context.Context) error { return ix.r.Close(ctx) }

// CatchUp waits until the index holds everything the log held when called.
func (ix *Index) CatchUp(ctx context.Context) error { return ix.r.CatchUp(ctx) }

// Get returns one run.
func (ix *Index) Get(runID string) (Entry, bool) { return ix.ix.Get(runID) }

// List returns the runs of owner ("" for all), newest first; roots only
// unless children is set.
func (ix *Index) List(owner string, children bool) []Entry { return ix.ix.List(owner, children) }

// Query returns a page of the runs q selects (projections.Runs.Query).
func (ix *Index) Query(q projections.RunQuery) (projections.RunPage, error) { return ix.ix.Query(q) }

// Versions counts owner's runs ("" for all) by agent and definition
// version (projections.Runs.Versions).
func (ix *Index) Versions(owner string) map[string]map[string]projections.VersionUse {
	return ix.ix.Versions(owner)
}

// Definitions returns every definition version a kept run names
// (projections.Runs.Definitions).
func (ix *Index) Definitions() map[string]bool { return ix.ix.Definitions() }

// Counts returns the number of runs by status.
func (ix *Index) Counts() map[runtime.CallStatus]int { return ix.ix.Counts() }

// Finished returns the sessions every run of which ended, none purged,
// at or before cutoff(agent) (projections.Runs.Finished).
func (ix *Index) Finished(cutoff func(agent string) (time.Time, bool)) []string {
	return ix.ix.Finished(cutoff)
}

// PurgedSessions returns the sessions whose runs are purged.
func (ix *Index) PurgedSessions() []string { return ix.ix.PurgedSessions() }
