package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// Store is the log's side of a purge (store/jetstream.Store).
type Store interface {
	ReadSession(ctx context.Context, sessionID string) (*cjs.SessionLog, error)
	RunFinished(ctx context.Context, sessionID, runID string) (bool, error)
	WritePurge(ctx context.Context, sessionID string, p events.Purge, at time.Time) (uint64, error)
	FinishPurge(ctx context.Context, sessionID string, marker uint64, objects []string) error
}

var _ Store = (*cjs.Store)(nil)

// Index is where a sweep finds its candidates: the node's run index.
type Index interface {
	// CatchUp waits until the index holds everything the log held when
	// it was called.
	CatchUp(ctx context.Context) error
	// Finished returns the sessions every run of which ended, none purged,
	// and whose last end is at or before cutoff(agent) for their agent;
	// an agent whose cutoff is not ok is kept forever.
	Finished(cutoff func(agent string) (time.Time, bool)) []string
	// PurgedSessions returns the purged sessions.
	PurgedSessions() []string
}

// Config configures a Sweeper.
type Config struct {
	Policy Policy
	Store  Store
	Index  Index
	// Forget removes what the node keeps of a purged session's runs
	// outside the log (budgets, waits, children, the session's kv); it
	// must be idempotent. Nil: nothing.
	Forget func(ctx context.Context, sessionID string, runs []events.PurgedRun) error
	// Mine reports whether this node sweeps the session (in a cluster,
	// the member the session is placed on); nil: every session. Two
	// members purging one session are safe (the marker is fenced), only
	// wasteful.
	Mine func(sessionID string) bool
	// Writable reports whether a purge marker may be written now: every
	// member of the cluster reads its schema version. Nil: always.
	Writable func() bool
	// Topology identifies the membership Mine places sessions on: when it
	// changes, the next sweep audits again the purged sessions this node
	// now owns, for a purge their former owner left half way. Nil: one
	// audit, at the first sweep.
	Topology func() uint64
	// Holder names this node in the markers it writes.
	Holder string
	// Interval is the time between sweeps; default a tenth of the
	// shortest retention, between 1 s and 10 min.
	Interval time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
	// OnSweep is told what each sweep did (metrics); nil: nothing.
	OnSweep func(Report)
	// AfterSweep runs at the end of each sweep that ran, with the index
	// caught up: what else the node keeps only for kept runs is pruned
	// there (the definition versions no kept run names). Its error is
	// logged; nil: nothing.
	AfterSweep func(ctx context.Context) error
}

// Sweeper purges the sessions whose retention ran out, one sweep per
// Interval.
type Sweeper struct {
	cfg     Config
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started atomic.Bool

	mu sync.Mutex
	// unfinished are purges whose marker is written and whose rest is
	// not yet removed, by session; audited is whether the sessions the
	// index lists as purged were checked since this Sweeper started (on
	// the topology auditedAt).
	unfinished map[string]bool
	audited    bool
	auditedAt  uint64
	// later are the sessions a sweep kept, with when to read them again:
	// when their retention runs out, or a while after a keep for another
	// reason (a run that has not ended, a parent that may continue it).
	later map[string]time.Time
}

// Report is what one sweep did.
type Report struct {
	// Purged sessions, with their Events and Bytes; Finished: purges
	// stopped half way and finished now; Failed: sessions whose purge
	// failed (logged; tried again next sweep).
	Purged, Finished, Failed int
	Events                   int
	Bytes                    int64
}

// NewSweeper returns a Sweeper; Start runs it.
func NewSweeper(cfg Config) (*Sweeper, error) {
	if cfg.Store == nil || cfg.Index == nil {
		return nil, errors.New("retention: a Sweeper needs a Store and an Index")
	}
	if cfg.Policy.Default < 0 {
		return nil, fmt.Errorf("retention: Policy.Default %v: must not be negative", cfg.Policy.Default)
	}
	for agent, d := range cfg.Policy.Agents {
		if d < 0 {
			return nil, fmt.Errorf("retention: Policy.Agents[%q] %v: must not be negative", agent, d)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("retention: Interval %v: must not be negative", cfg.Interval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = min(max(cfg.Policy.Shortest()/10, time.Second), 10*time.Minute)
	}
	return &Sweeper{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{}), unfinished: map[string]bool{}, later: map[string]time.Time{}}, nil
}

// Start sweeps every Interval until Close; it does nothing when every
// session is kept forever, or when called again.
func (w *Sweeper) Start() {
	if !w.started.CompareAndSwap(false, true) {
		return
	}
	if w.cfg.Policy.Shortest() == 0 {
		close(w.done)
		return
	}
	go func() {
		defer close(w.done)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-w.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		t := time.NewTicker(w.cfg.Interval)
		defer t.Stop()
		for {
			rep, err := w.Sweep(ctx)
			if err != nil && ctx.Err() == nil {
				w.cfg.Logger.Warn("retention: sweep failed; trying again next interval", "err", err, "interval", w.cfg.Interval)
			}
			if w.cfg.OnSweep != nil {
				w.cfg.OnSweep(rep)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Close stops the sweeps, waiting for one in progress (until ctx is
// done).
func (w *Sweeper) Close(ctx context.Context) error {
	w.once.Do(func() { close(w.stop) })
	if w.started.CompareAndSwap(false, true) { // never started: nothing runs
		close(w.done)
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sweep purges, once, every session whose retention ran out and finishes
// every purge that stopped half way. A session's failure is logged and
// counted, and the sweep goes on; the error is ctx's, or what stopped the
// sweep as a whole.
func (w *Sweeper) Sweep(ctx context.Context) (Report, error) {
	var rep Report
	shortest := w.cfg.Policy.Shortest()
	if shortest == 0 {
		return rep, nil
	}
	if w.cfg.Writable != nil && !w.cfg.Writable() {
		w.cfg.Logger.Debug("retention: not every member reads a purge marker yet; no purge this sweep")
		return rep, nil
	}
	// The candidates come from the index: at a node's start it is still
	// being rebuilt from the log, and the purged sessions it lists are
	// those whose markers it has read so far.
	cctx, cancel := context.WithTimeout(ctx, max(w.cfg.Interval, time.Minute))
	err := w.cfg.Index.CatchUp(cctx)
	cancel()
	if err != nil {
		return rep, fmt.Errorf("retention: the run index did not catch up: %w", err)
	}
	finish, audit := w.toFinish()
	for _, s := range finish {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		w.one(ctx, s, &rep)
	}
	if audit != nil {
		audit()
	}
	now := w.cfg.Now()
	cutoff := func(agent string) (time.Time, bool) {
		d := w.cfg.Policy.For(agent)
		return now.Add(-d), d > 0
	}
	candidates := w.cfg.Index.Finished(cutoff)
	w.forgetLater(candidates)
	for _, s := range candidates {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if w.cfg.Mine != nil && !w.cfg.Mine(s) {
			continue
		}
		w.mu.Lock()
		next, wait := w.later[s]
		w.mu.Unlock()
		if wait && now.Before(next) {
			continue
		}
		w.one(ctx, s, &rep)
	}
	if w.cfg.AfterSweep != nil && ctx.Err() == nil {
		if err := w.cfg.AfterSweep(ctx); err != nil {
			w.cfg.Logger.Warn("retention: after the sweep", "err", err)
		}
	}
	return rep, ctx.Err()
}

// forgetLater drops the sessions no longer candidates from later (purged,
// or continued), so that it holds at most the candidates.
func (w *Sweeper) forgetLater(candidates []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.later) == 0 {
		return
	}
	in := make(map[string]bool, len(candidates))
	for _, s := range candidates {
		in[s] = true
	}
	for s := range w.later {
		if !in[s] {
			delete(w.later, s)
		}
	}
}

// toFinish are the sessions whose purge may have stopped half way: those
// this Sweeper left so, and, at its first sweep and after each change of
// the topology, every purged session the index lists that this node owns
// (a purge its former owner, or this node before a restart, left half
// way). audit, when not nil, records that the audit was made: call it once
// the sessions were read.
func (w *Sweeper) toFinish() (out []string, audit func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.unfinished {
		out = append(out, s)
	}
	var topo uint64
	if w.cfg.Topology != nil {
		topo = w.cfg.Topology()
	}
	if w.audited && topo == w.auditedAt {
		return out, nil
	}
	for _, s := range w.cfg.Index.PurgedSessions() {
		if !w.unfinished[s] && (w.cfg.Mine == nil || w.cfg.Mine(s)) {
			out = append(out, s)
		}
	}
	return out, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.audited, w.auditedAt = true, topo
	}
}

// one reads session s, decides and does what it says.
func (w *Sweeper) one(ctx context.Context, s string, rep *Report) {
	log := w.cfg.Logger.With("session", s)
	fail := func(what string, err error) {
		if ctx.Err() != nil {
			return
		}
		rep.Failed++
		log.Warn("retention: "+what+"; trying again later", "err", err)
		if !w.isUnfinished(s) {
			w.mu.Lock()
			w.later[s] = w.cfg.Now().Add(keepFor * w.cfg.Interval)
			w.mu.Unlock()
		}
	}
	sl, err := w.cfg.Store.ReadSession(ctx, s)
	if err != nil {
		fail("reading the session failed", err)
		return
	}
	if sl == nil {
		w.finished(s)
		return
	}
	facts := Session{ID: s, Runs: sl.Runs, LastTime: sl.LastTime, Purged: sl.Purge != nil}
	if !facts.Purged && len(sl.Runs) > 0 {
		if last := sl.Runs[len(sl.Runs)-1]; last.ParentRunID != "" {
			if facts.ParentEnded, err = w.cfg.Store.RunFinished(ctx, last.ParentSessionID, last.ParentRunID); err != nil {
				fail("reading the parent run failed", err)
				return
			}
		}
	}
	now := w.cfg.Now()
	v := Decide(facts, w.cfg.Policy, now)
	switch v.Action {
	case Keep:
		w.finished(s) // not purged: nothing to finish
		log.Debug("retention: kept", "why", v.Why)
		next := now.Add(keepFor * w.cfg.Interval)
		if v.Due.After(now) {
			next = v.Due
		}
		w.mu.Lock()
		w.later[s] = next
		w.mu.Unlock()
	case Finish:
		if sl.Events == 1 { // the marker alone: the rest, objects and entries, went before the events
			w.finished(s)
			return
		}
		w.mu.Lock()
		w.unfinished[s] = true // found by an audit: tried again next sweep until done
		w.mu.Unlock()
		if err := w.finish(ctx, s, sl.Purge.Runs, sl.PurgeSeq, sl.Purge.Objects); err != nil {
			fail("finishing the purge failed", err)
			return
		}
		rep.Finished++
		log.Info("retention: purge finished", "marker_seq", sl.PurgeSeq, "events_left", sl.Events-1)
	case Purge:
		p := events.Purge{Runs: sl.Runs, Before: sl.Last, Events: sl.Events, Bytes: sl.Bytes, Objects: sl.Objects,
			Retention: v.Retention.String(), Holder: w.cfg.Holder}
		// Until the rest is removed the session is unfinished: also when
		// the marker's write fails with an unknown outcome (it may be
		// stored), the next sweep reads the session and decides again.
		w.mu.Lock()
		w.unfinished[s] = true
		w.mu.Unlock()
		seq, err := w.cfg.Store.WritePurge(ctx, s, p, now)
		if errors.Is(err, runtime.ErrConflict) {
			w.finished(s)
			log.Info("retention: the session moved on while it was read; kept", "err", err)
			return
		}
		if err != nil {
			fail("writing the purge marker failed", err)
			return
		}
		// The marker is written: the rest is removed even while the
		// Sweeper closes (within finishTimeout), rather than left to the
		// audit of the node's next start.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		if err := w.finish(fctx, s, p.Runs, seq, p.Objects); err != nil {
			fail("the marker is written but removing the session failed", err)
			return
		}
		rep.Purged++
		rep.Events += p.Events
		rep.Bytes += p.Bytes
		log.Info("retention: session purged", "runs", len(p.Runs), "events", p.Events, "bytes", p.Bytes, "objects", len(p.Objects),
			"last_event", sl.LastTime, "retention", v.Retention, "marker_seq", seq)
	}
}

// keepFor is how many intervals a session kept for another reason than
// its retention (a run not ended, a parent that may continue it, a log
// this build cannot read) waits before it is read again: every sweep
// would read the whole log of each such session.
const keepFor = 10

// finishTimeout bounds the removal of what a purge's marker left, once
// the marker is written.
const finishTimeout = 30 * time.Second

// finish removes what a purge left of session s: the node's entries for
// its runs, then the objects, then the log's events below the marker (so
// a marker alone in the log means nothing is left).
func (w *Sweeper) finish(ctx context.Context, s string, runs []events.PurgedRun, marker uint64, objects []string) error {
	if w.cfg.Forget != nil {
		if err := w.cfg.Forget(ctx, s, runs); err != nil {
			return err
		}
	}
	if err := w.cfg.Store.FinishPurge(ctx, s, marker, objects); err != nil {
		return err
	}
	w.finished(s)
	return nil
}

func (w *Sweeper) isUnfinished(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unfinished[s]
}

func (w *Sweeper) finished(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.unfinished, s)
}
