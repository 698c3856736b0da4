package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/kvcap"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/retention"
)

// retentionFlag is --retention: how long a finished session is kept after
// its last event ("30d", "12h", "forever"); an agent's definition may
// give its own (retention:).
type retentionFlag time.Duration

func (r *retentionFlag) String() string {
	if *r == 0 {
		return "forever"
	}
	return time.Duration(*r).String()
}

func (r *retentionFlag) Set(v string) error {
	d, err := retention.ParseDuration(v)
	if err != nil {
		return err
	}
	*r = retentionFlag(d)
	return nil
}

// retentionFlags adds --retention and --retention-sweep to fs.
func retentionFlags(fs *flag.FlagSet, keep *retentionFlag, sweep *time.Duration) {
	fs.Var(keep, "retention", "how long a finished session is kept after its last event before it is purged (30d, 12h, forever); an agent's retention: overrides it")
	fs.DurationVar(sweep, "retention-sweep", 0, "time between retention sweeps (default: a tenth of the shortest retention, 1s to 10m)")
}

// startRetention starts the sweeper that purges the sessions whose
// retention ran out; nil when every session is kept forever.
func startRetention(ctx context.Context, o serveOptions, a *app, ix *runindex.Index) (closeFn func(context.Context), err error) {
	if o.retentionSweep < 0 {
		return nil, fmt.Errorf("--retention-sweep %v: must not be negative", o.retentionSweep)
	}
	policy := a.dep.retention(time.Duration(o.retention))
	if policy.Shortest() == 0 {
		return func(context.Context) {}, nil
	}
	st, err := logStore(ctx, a.nc, a.js, a.stream, "retention", a.keys)
	if err != nil {
		return nil, fmt.Errorf("retention: %w", err)
	}
	cfg := retention.Config{
		Policy: policy, Store: st, Index: ix,
		Forget: func(ctx context.Context, sessionID string, runs []events.PurgedRun) error {
			ids := make([]string, len(runs))
			for i, r := range runs {
				ids[i] = r.RunID
			}
			if err := a.node.ForgetRuns(ctx, ids); err != nil {
				return err
			}
			return kvcap.Forget(ctx, a.js, a.kv, sessionID)
		},
		Mine: a.node.Owns, Writable: a.node.PurgesWritable, Topology: a.node.Topology, Holder: a.node.MemberID(),
		AfterSweep: func(ctx context.Context) error {
			removed, err := a.node.PruneVersions(ctx, ix.Definitions(), actors.VersionGrace)
			for _, id := range removed {
				o.logger.Info("retention: definition version removed: no kept run names it", "version", id)
			}
			return err
		},
		Interval: o.retentionSweep, Logger: o.logger,
	}
	if o.metrics != nil {
		cfg.OnSweep = o.metrics.swept
	}
	sw, err := retention.NewSweeper(cfg)
	if err != nil {
		_ = st.Close(ctx)
		return nil, err
	}
	sw.Start()
	o.logger.Info("retention: purging finished sessions", "default", time.Duration(o.retention), "agents", len(policy.Agents))
	return func(ctx context.Context) {
		_ = sw.Close(ctx)
		_ = st.Close(ctx)
	}, nil
}
