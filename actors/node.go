// Package actors is the host side of the run loop on protoactor-go: each
// live run is a virtual actor (a cluster kind addressed by session and run
// ID) that owns the run's lease and is its only writer; the node's
// Controller gives runs their children, budgets, waits and cancellations;
// parents and children talk by messages, never by polling.
//
// # How a run moves
//
//  1. A run is created by a fenced RunCreated event (a root by Node.Run, a
//     child by Spawn or Continue: the child's IDs derive from the parent's
//     run ID and the tool-call ID, and the creation expects the child
//     session's sequence 0, so a retried spawn finds the same child, C25).
//  2. A Wake message activates the run's actor. The actor starts a
//     runtime.Run attempt off its mailbox; the attempt opens the store
//     (taking the lease, fencing out any older owner) and its outcome comes
//     back as a message.
//  3. An attempt that returns ErrWaiting leaves the actor idle: no
//     goroutine, no reads; it is passivated after an idle period. The
//     deadline of its waits is armed as a timer (re-armed at every
//     activation, so it fires after a restart too).
//  4. A completed commit lands on its own subject (c.done); a durable
//     consumer turns each completion, and each cancellation or failure,
//     into a ChildFinished message to the parent's actor, and acknowledges
//     it only when the parent accepted it. The parent re-runs an attempt,
//     whose Wait reads the children's durable state.
//  5. A member wakes every active run it owns (by identity, on the current
//     topology) whose lease holder is not a member, or is another member
//     that has held it for two sweep intervals without running it here: at
//     start, when a member leaves, and every SweepInterval in a cluster. A
//     run of a dead member thus resumes on a survivor from its last commit,
//     with a RecoveryNotice. A run actor moved away by a topology change
//     while it had work hands it to the new owner.
//
// Budgets live in a JetStream KV bucket per root run, updated with
// compare-and-set: steps reserved before every model request, tokens
// recorded after, a wall-clock deadline that cancels the attempt.
package actors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors/actorspb"
	"github.com/cairn-agents/cairn/actors/definition"
	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/actors/sweep"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/clock"
	"github.com/cairn-agents/cairn/internal/lru"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/schema"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// Agent is a deployed agent definition with its model limits, for root
// runs its budget, and its model: what a run of it is pinned to
// (definition.Version).
type Agent = definition.Agent

// Config configures a Node.
type Config struct {
	// Conn is the NATS connection; required.
	Conn *nats.Conn
	// Store configures the run log (stream name, replicas).
	Store cjs.Config
	// Agents are the deployed definitions; every subagent must be one.
	Agents []Agent
	// Model returns the model of an agent; required. It is called at
	// start for every deployed agent, and later for an agent of a pinned
	// version this node does not deploy as it is now (a run admitted
	// before a deploy, or by a member with other files): build the model
	// from the Agent given (Agent.Model), not from the slug alone.
	Model func(a Agent) (model.Model, error)
	// Capabilities is the host catalog; each agent gets the ones its
	// definition names.
	Capabilities []runtime.Capability
	// Backend performs capability calls; BackendFor, when set, gives each
	// run its own (scoped to the run's session, say) instead.
	Backend    runtime.Backend
	BackendFor func(run events.Run) runtime.Backend
	Executors  runtime.ExecutorFactory
	Redactor   runtime.Redactor
	// Sink receives every run's diagnostics; nil discards them.
	Sink func(run events.Run, ev runtime.SinkEvent)
	// OnAttempt, when set, observes every attempt this node ran to its
	// end (metrics): an attempt that found nothing to run (its run had
	// ended, or had no record yet) is not one.
	OnAttempt func(AttemptEnded)
	// Logger; nil discards.
	Logger *slog.Logger
	// IdleTimeout passivates an idle run actor; zero means 30s.
	IdleTimeout time.Duration
	// Now; nil means Clock.Now.
	Now func() time.Time
	// Clock runs the node's timers and ages: the deadlines that wake
	// parked runs, the sweep's ticker and the lease ages it compares, the
	// backoff of a failed run's end; nil means the wall clock.
	Clock clock.Clock
	// Waits is the clock of the node's waits on its transport: the
	// backoffs of a request, a rejoin and a Result that reads through an
	// outage, the completion consumer's upkeep, the age of a readiness
	// probe's answer and the drain bound of Close; nil means the wall
	// clock. It is apart from Clock so that a test which drives a run's
	// time counts only the run's timers on it, and a test of a transport
	// wait moves that wait alone.
	Waits clock.Clock
	// MaxRetries of an attempt that failed with an error that is not a
	// budget, input or contract error; zero means 5. Then the run fails.
	MaxRetries int
	// DrainTimeout bounds how long Close waits for attempts to reach a
	// commit boundary; zero means 10s.
	DrainTimeout time.Duration
	// Cluster places run actors across the members of a cluster; nil
	// runs this node as a cluster of one (soloProvider). Store.Holder is
	// set per member (its ID).
	Cluster *ClusterConfig
	// SchemaLevel caps the schema version this node writes (1 up to
	// events.SchemaVersion; zero: no cap but the cluster's level). An
	// operator pins it during an upgrade to keep a rollback to the build
	// before possible, and raises it once the new build has proved
	// itself (operations.md, Upgrades).
	SchemaLevel int
	// Hooks are called at fixed points of the node's work, for tests that
	// need an interleaving to happen every time; the zero value calls none.
	Hooks Hooks

	// activeKV makes the node write the earlier builds' active set
	// whatever its cluster (activeKV), for the tests of that set.
	activeKV bool
}

// Hooks are test hooks of a Node; a nil hook is not called.
type Hooks struct {
	// Admitted is called when a run the API starts is in the active set
	// and its record is not written yet; an error fails the start there,
	// as a crash at that point would (the entry stays, no record).
	Admitted func(sessionID, runID string) error
	// WaitRead is called by a wait of run runID once it has read its
	// children's states, before it decides to park.
	WaitRead func(runID string)
	// Tracked is called by a spawn when it has read its child running and
	// is about to put it in the active set.
	Tracked func(sessionID, runID string)
	// Pending is called when a wake reaches a run whose attempt is
	// running (the wake is owed to the next attempt).
	Pending func(runID string)
	// Created is called when a start's record is written; an error is
	// taken as the write's own (its outcome unknown to the caller, as with
	// a lost acknowledgement that could not be settled).
	Created func(sessionID, runID string) error
	// Sweep is called as a member's sweep begins; an error fails the
	// sweep there.
	Sweep func(first, full bool) error
	// ResultWaits is called by Result each time it waits for the run to
	// end, with how long it waits at most before it reads again.
	ResultWaits func(runID string, again time.Duration)
	// ServerClock maps the time read on JetStream's clock (the age of an
	// unrecorded active-set entry is confirmed on it): a test that moves
	// the node's clock (Config.Now) moves the server's with it here.
	ServerClock func(time.Time) time.Time
}

// Node runs agent tasks on one member of a protoactor-go cluster.
type Node struct {
	cfg Config
	// memberIDs are every member ID this node has had, each the holder of
	// the leases its runs took while it was current.
	memberIDs sync.Map
	// unreadable holds, by run ID, why each run parked unread: its log has
	// an event of a schema newer than this build reads (Unreadable).
	unreadable sync.Map
	agents     map[string]*Agent
	store      *cjs.Store
	runlog     *runLog
	ledger     *ledger
	waits      *waits
	// actives is the active set, derived from the log (activeindex.go).
	actives *activeIndex
	// activeW writes and lists the active set of earlier builds (bucket
	// cairn_active), written while a member of one is in the cluster
	// (activeKV); childrenW the children's bucket.
	activeW   *kvBucket
	childrenW *kvBucket
	// inputs are the compiled input schemas of the agents that have one
	// (subagents): a run of one started by the API is checked as a
	// parent's spawn would be.
	inputs map[string]*schema.Schema
	// closers close what Start opened, in reverse order (closeAll).
	closers []func(context.Context) error
	// serverClock reads JetStream's clock (serverNow; tests move it).
	serverClock func(context.Context) (time.Time, error)
	// purging is set while a sweep's replacement of old delete markers
	// runs (one at a time, off the member's loop), backfilling while one
	// puts the active runs back in the earlier builds' active set.
	purging, backfilling atomic.Bool
	// wroteNoKV is set once the node has left the earlier builds' active
	// set unwritten (activeKV): runs it admitted since are missing there.
	wroteNoKV atomic.Bool
	// versions are the definitions runs are pinned to (versions.go).
	versions *versions
	caps     map[string]runtime.Capability
	logger   *slog.Logger

	// consume delivers completions (completions.go); ready probes the
	// node's readiness (ready.go).
	consume   *completions
	ready     readiness
	wakes     wakeQueue
	deadlines *deadlines
	// finishing bounds the completions handled at once; handlers holds
	// them so that shutdown waits for them.
	finishing chan struct{}
	handlers  sync.WaitGroup
	// finStopped (under mu) refuses completions once shutdown began.
	finStopped bool

	mu sync.Mutex
	// member is this node's current incarnation in the cluster; it
	// changes only when the member is expelled and joins again. It is nil
	// until Start has a member: memberSet is closed then.
	member    *member
	memberSet chan struct{}
	watchers  map[string][]chan struct{}
	closed    bool
	// drain is closed by Close: attempts stop at their next commit boundary.
	drain    chan struct{}
	attempts sync.WaitGroup
}

const runKind = "run"

// Start validates the configuration, opens the log and the ledgers, starts
// the actor system, wakes every active run and starts delivering
// completions.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Conn == nil || cfg.Model == nil || (cfg.Backend == nil && cfg.BackendFor == nil) || cfg.Executors == nil || cfg.Redactor == nil {
		return nil, errors.New("actors: Config needs Conn, Model, Backend (or BackendFor), Executors and Redactor")
	}
	if cfg.Cluster != nil {
		if err := cfg.Cluster.validate(); err != nil {
			return nil, err
		}
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	if cfg.Waits == nil {
		cfg.Waits = clock.Real{}
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 5
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, agents: map[string]*Agent{}, caps: map[string]runtime.Capability{}, logger: logger,
		watchers: map[string][]chan struct{}{}, drain: make(chan struct{}), memberSet: make(chan struct{})}
	n.serverClock = n.serverNow
	if move := cfg.Hooks.ServerClock; move != nil {
		n.serverClock = func(ctx context.Context) (time.Time, error) {
			t, err := n.serverNow(ctx)
			return move(t), err
		}
	}
	n.deadlines = newDeadlines(cfg.Clock, func(sessionID, runID string) {
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if !closed {
			n.wake(sessionID, runID, lifecycle.ReasonDeadline)
		}
	})
	for _, c := range cfg.Capabilities {
		n.caps[c.Name] = c
	}
	for i := range cfg.Agents {
		a := &cfg.Agents[i]
		if _, dup := n.agents[a.Definition.Slug]; dup {
			return nil, fmt.Errorf("actors: agent %q deployed twice", a.Definition.Slug)
		}
		n.agents[a.Definition.Slug] = a
	}
	n.inputs = map[string]*schema.Schema{}
	for slug, a := range n.agents {
		if len(a.Definition.InputSchema) > 0 {
			s, err := schema.Compile(a.Definition.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("actors: agent %q: input_schema: %w", slug, err)
			}
			n.inputs[slug] = s
		}
	}
	for slug, a := range n.agents {
		for _, sub := range a.Definition.Subagents {
			if _, ok := n.agents[sub]; !ok {
				return nil, fmt.Errorf("actors: agent %q: subagent %q is not deployed", slug, sub)
			}
		}
		for _, c := range a.Definition.Capabilities {
			if _, ok := n.caps[c]; !ok {
				return nil, fmt.Errorf("actors: agent %q: capability %q is not in the catalog", slug, c)
			}
		}
	}
	if n.versions, err = newVersions(n.agents, n.caps, cfg.Model); err != nil {
		return nil, err
	}
	n.versions.keys = cfg.Store.Keys
	if cfg.SchemaLevel < 0 || cfg.SchemaLevel > events.SchemaVersion {
		return nil, fmt.Errorf("actors: SchemaLevel %d: want 1 to %d (or 0: this build's)", cfg.SchemaLevel, events.SchemaVersion)
	}
	if (cfg.Cluster != nil || cfg.SchemaLevel > 0) && cfg.Store.Schema == nil {
		// Every store of the node writes the cluster's level: the newest
		// schema every member reads (a rolling upgrade runs two builds),
		// at most the pinned one.
		cfg.Store.Schema = n.level
		n.cfg.Store.Schema = n.level
	}
	if n.store, err = cjs.New(ctx, cfg.Conn, cfg.Store); err != nil {
		return nil, err
	}
	n.closers = append(n.closers, n.store.Close)
	defer func() {
		if err != nil { // a Start that fails leaves nothing behind
			n.closeAll(context.Background())
		}
	}()
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, err
	}
	var stream jetstream.Stream
	err = cjs.Setup(ctx, func(ctx context.Context) (err error) {
		stream, err = js.Stream(ctx, events.StreamName(cfg.Store.Stream))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("actors: stream: %w", err)
	}
	n.runlog = &runLog{store: n.store, now: cfg.Now, records: lru.New[string, events.Run](recordCacheItems, recordCacheBytes),
		created: lru.New[string, uint64](recordCacheItems, recordCacheItems*128)}
	n.followActive(stream)
	replicas := max(cfg.Store.Replicas, 1)
	bucket := func(name string) error {
		if err := cjs.Setup(ctx, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateKeyValue(ctx, bucketConfig(name, replicas))
			return err
		}); err != nil {
			return fmt.Errorf("actors: bucket %s: %w", name, err)
		}
		return nil
	}
	// The buckets are made here; Cairn writes them, and reads them from
	// the stream leader, through its own writers below.
	for _, name := range []string{"cairn_budgets", "cairn_waits", "cairn_children", activeBucket, definitionsBucket} {
		if err := bucket(name); err != nil {
			return nil, err
		}
	}
	writer := func(bucket string) (*kvBucket, error) {
		// The store's writes and these share one in-flight count: when
		// many runs write at once, every stream's writes batch.
		w, err := n.store.LogOn(ctx, "KV_"+bucket)
		if err != nil {
			return nil, fmt.Errorf("actors: bucket %s: %w", bucket, err)
		}
		n.closers = append(n.closers, w.Close)
		return newKVBucket(w, bucket), nil
	}
	budgetsW, err := writer("cairn_budgets")
	if err != nil {
		return nil, err
	}
	if n.activeW, err = writer(activeBucket); err != nil {
		return nil, err
	}
	if n.childrenW, err = writer("cairn_children"); err != nil {
		return nil, err
	}
	n.ledger = &ledger{w: budgetsW, now: cfg.Now}
	if n.versions.w, err = writer(definitionsBucket); err != nil {
		return nil, err
	}
	if n.versions.kv, err = js.KeyValue(ctx, definitionsBucket); err != nil {
		return nil, fmt.Errorf("actors: bucket %s: %w", definitionsBucket, err)
	}
	freshStop, freshDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(freshDone); n.keepFresh(freshStop) }()
	n.closers = append(n.closers, func(context.Context) error { close(freshStop); <-freshDone; return nil })
	if err := cjs.Setup(ctx, n.versions.publish); err != nil {
		return nil, err
	}
	waitsW, err := writer("cairn_waits")
	if err != nil {
		return nil, err
	}
	n.waits = &waits{w: waitsW, now: cfg.Now, known: lru.New[string, waitEntry](waitCacheItems, waitCacheBytes)}
	if err := n.openReadiness(ctx, js, replicas); err != nil {
		return nil, err
	}

	m, err := n.startMember(ctx)
	if err != nil {
		n.abandon()
		return nil, err
	}
	n.setMember(m)
	if err := n.startConsumer(ctx, stream); err != nil {
		n.abandon()
		n.shutdown()
		return nil, err
	}
	go n.run(m, expelledOf(m.provider))
	return n, nil
}

// current is the node's current member; nil before Start has one.
// Unreadable reports why run is parked on this node unread (its log holds
// an event of a schema version newer than this build reads), if it is:
// the run is neither failed nor retried, and a node of a newer build
// resumes it. The API shows such a run as parked, with the reason.
func (n *Node) Unreadable(runID string) (string, bool) {
	v, ok := n.unreadable.Load(runID)
	if !ok {
		return "", false
	}
	return v.(string), true
}

// level is the schema version the node writes: its member's provider's
// Level (cluster.Provider) when clustered, else this build's, at most
// Config.SchemaLevel; 1 while it has no member (a reader of any version
// reads it).
func (n *Node) level() int {
	m := n.current()
	if m == nil {
		return 1
	}
	level := events.SchemaVersion
	if l, ok := m.provider.(interface{ Level() int }); ok {
		level = l.Level()
	}
	if n.cfg.SchemaLevel > 0 {
		level = min(level, n.cfg.SchemaLevel)
	}
	return level
}

// purgedBy reports whether last, the last event of a session, is the
// session's purge marker: nothing may be written into it any more.
func purgedBy(last *jetstream.RawStreamMsg, sessionID string) bool {
	return last != nil && last.Subject == events.SessionPurgedSubject(sessionID)
}

// PurgesWritable reports whether this node may write a session's purge
// marker: every member of its cluster reads its schema version
// (events.PurgeVersion; operations.md, Upgrades).
func (n *Node) PurgesWritable() bool { return n.level() >= events.PurgeVersion }

// Owns reports whether the session's retention is this member's to
// sweep: the session is placed on it (as a run's identity is). Two members
// that both think so are safe (a purge is fenced), only wasteful.
func (n *Node) Owns(sessionID string) bool {
	m := n.current()
	if m == nil {
		return false
	}
	members, in := m.topology()
	return in && sweep.Place(members).Owner(sessionID) == m.addr
}

// Topology identifies this member's current view of the cluster: it
// changes whenever a member joins or leaves, or this node rejoins as a new
// member (a sweep that audits what this member owns does it again then).
func (n *Node) Topology() uint64 {
	m := n.current()
	if m == nil {
		return 0
	}
	members, _ := m.topology()
	ids := make([]string, len(members))
	for i, mem := range members {
		ids[i] = mem.ID
	}
	slices.Sort(ids)
	h := fnv.New64a()
	for _, id := range append([]string{m.id}, ids...) {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// ForgetRuns removes what the node's buckets hold of finished runs whose
// session was purged: their budgets, wait registrations and children
// (retention.Sweeper's Forget). Each removal may be done again.
func (n *Node) ForgetRuns(ctx context.Context, runIDs []string) error {
	for _, run := range runIDs {
		if err := events.ValidID(run); err != nil {
			return fmt.Errorf("actors: forget run: %w", err)
		}
		for _, f := range []struct {
			b      *kvBucket
			filter string
		}{{n.ledger.w, run}, {n.waits.w, run + ".>"}, {n.childrenW, run + ".>"}} {
			if err := f.b.w.PurgeSubject(ctx, f.b.subject(f.filter), 0); err != nil {
				return fmt.Errorf("actors: forget run %s in %s: %w", run, f.b.bucket, err)
			}
		}
	}
	return nil
}

func (n *Node) current() *member {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.member
}

// setMember makes m the node's member; the first one releases the
// requests that waited for it (awaitMember).
func (n *Node) setMember(m *member) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.member = m
	select {
	case <-n.memberSet:
	default:
		close(n.memberSet)
	}
}

// abandon closes a node whose Start failed: nothing will call Close, and
// requests waiting for a member (awaitMember) give up.
func (n *Node) abandon() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.closed {
		n.closed = true
		close(n.drain)
	}
}

// awaitMember returns the node's member, waiting for Start to set it: the
// member's actors run, and send requests and wakes, before Start has
// returned (another member activates a run here as soon as this member is
// in the topology). It returns nil when the node closes first.
func (n *Node) awaitMember() *member {
	n.mu.Lock()
	m, set := n.member, n.memberSet
	n.mu.Unlock()
	if m != nil {
		return m
	}
	select {
	case <-set:
		return n.current()
	case <-n.drain:
		return nil
	}
}

// LiveRuns is the number of run actors live on this node: runs in an
// attempt, and parked ones not yet passivated (IdleTimeout). A parked,
// passivated run costs no actor.
func (n *Node) LiveRuns() int {
	m := n.current()
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.local)
}

// MemberID is the ID of this node's current cluster member; it is the
// holder named in the lease of every run the member opens.
func (n *Node) MemberID() string { return n.current().id }

// WasHolder reports whether a lease's holder is one of the members this
// node has had, through every rejoin: whether the run it leased ran here.
func (n *Node) WasHolder(holder string) bool {
	_, ok := n.memberIDs.Load(holder)
	return ok
}

// DefaultDrainTimeout is Config.DrainTimeout's default.
const DefaultDrainTimeout = 10 * time.Second

// Close drains the node: running attempts stop at their next commit
// boundary (until ctx is done or DrainTimeout has passed, whichever is
// first; then they are cancelled), completions stop being delivered, the
// actor system stops and the node's writers are closed. Runs keep their
// durable state and leases; another node (or this one restarted) resumes
// them. It returns ctx's error when ctx cut the drain short (the node is
// closed all the same), or the first error closing a writer. A second
// Close returns nil at once.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	close(n.drain)
	n.mu.Unlock()
	done := make(chan struct{})
	go func() { n.attempts.Wait(); close(done) }()
	var cut error
	// The waits' clock, not the runs': a process that shuts down answers
	// to its supervisor's kill timeout, not to a run's time.
	drain := n.cfg.Waits.NewTimer(n.cfg.DrainTimeout)
	select {
	case <-done:
	case <-drain.C():
		n.logger.Warn("actors: attempts still running after the drain timeout; cancelling them")
	case <-ctx.Done():
		n.logger.Warn("actors: the drain was cut short; cancelling the attempts still running", "err", ctx.Err())
		cut = fmt.Errorf("actors: close: drain cut short: %w", ctx.Err())
	}
	drain.Stop()
	n.shutdown()
	// Attempts cancelled by the shutdown still finish their bookkeeping
	// (a step reserved ahead given back: refundAhead) through the store's
	// writers: those close after them, or after afterCancel at most.
	after := n.cfg.Waits.NewTimer(afterCancel)
	select {
	case <-done:
	case <-after.C():
		n.logger.Warn("actors: attempts still running after they were cancelled; closing the store under them")
	}
	after.Stop()
	return errors.Join(cut, n.closeAll(context.WithoutCancel(ctx)))
}

// afterCancel bounds the wait for cancelled attempts to return at Close.
const afterCancel = 5 * time.Second

// closeAll closes what Start opened (the store, the writers), last opened
// first, once.
func (n *Node) closeAll(ctx context.Context) error {
	n.mu.Lock()
	closers := n.closers
	n.closers = nil
	n.mu.Unlock()
	var errs []error
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (n *Node) shutdown() {
	n.deadlines.stop()
	n.wakes.stopRetries()
	if n.consume != nil {
		n.consume.Stop()
	}
	n.mu.Lock()
	n.finStopped = true
	n.mu.Unlock()
	n.handlers.Wait()
	if m := n.current(); m != nil {
		m.stop(true)
	}
}

func (n *Node) now() time.Time { return n.cfg.Now() }

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Run starts a root run of agent with message and returns its session and
// run IDs.
func (n *Node) Run(ctx context.Context, agent, message string) (sessionID, runID string, err error) {
	return n.RunAs(ctx, "", agent, message)
}

// RunAs starts a root run owned by owner (an API principal): StartRun with
// no idempotency key.
func (n *Node) RunAs(ctx context.Context, owner, agent, message string) (sessionID, runID string, err error) {
	s, err := n.StartRun(ctx, StartRequest{Owner: owner, Agent: agent, Message: message})
	return s.SessionID, s.RunID, err
}

// detached is the context of a run's creation and bookkeeping, from the
// active set's write on: a caller that goes away (an HTTP or MCP client
// whose request is cancelled) must not stop it half done, with the run in
// the active set and its record not written. It keeps the caller's values
// and is bounded by beginTimeout.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), beginTimeout)
}

// beginTimeout bounds the creation and bookkeeping of a run the API
// starts.
const beginTimeout = 30 * time.Second

// Errors of the node's API.
var (
	ErrNotFound = errors.New("actors: not found")
	ErrInvalid  = errors.New("actors: invalid request")
	ErrBusy     = errors.New("actors: session busy")
	// ErrUnavailable: the node cannot admit a run now (the active set
	// refused it); nothing was written, and the same request may be tried
	// again later.
	ErrUnavailable = errors.New("actors: unavailable")
	// ErrPurged: the session was purged when its retention ran out; it
	// cannot be continued, and its runs' events are gone.
	ErrPurged = errors.New("actors: purged")
)

// Continue starts a new root run in the session of a completed root run,
// with the user's answer (after a needs_input reply, say). The new run has
// its own budget; the session's transcript carries over.
func (n *Node) Continue(ctx context.Context, sessionID, message string) (runID string, err error) {
	if err := checkMessage(nil, nil, message); err != nil { // an answer: text, whatever the agent's input schema
		return "", err
	}
	c := &controller{n: n}
	latest, err := c.latestRun(ctx, sessionID)
	if err != nil {
		return "", err
	}
	if latest == nil {
		if m, err := n.runlog.last(ctx, events.SessionPurgedSubject(sessionID)); err != nil {
			return "", err
		} else if m != nil {
			return "", fmt.Errorf("%w: session %s was purged when its retention ran out; start a new run", ErrPurged, sessionID)
		}
		return "", fmt.Errorf("%w: session %s", ErrNotFound, sessionID)
	}
	if latest.ParentRunID != "" {
		return "", fmt.Errorf("%w: session %s belongs to a child run; its parent continues it", ErrInvalid, sessionID)
	}
	st, err := n.runlog.status(ctx, sessionID, latest.RunID)
	if err != nil {
		return "", err
	}
	if st.Status != runtime.StatusCompleted {
		return "", fmt.Errorf("%w: session %s has a run that is %s", ErrBusy, sessionID, st.Status)
	}
	a := n.agents[latest.Agent]
	if a == nil {
		return "", fmt.Errorf("%w: agent %q is not deployed", ErrNotFound, latest.Agent)
	}
	last, err := n.runlog.last(ctx, events.SessionAll(sessionID))
	if err != nil {
		return "", err
	}
	if purgedBy(last, sessionID) {
		// The marker is written and the rest not yet removed: the runs
		// read above are going. A creation fenced on the marker would be
		// stored, and never run.
		return "", fmt.Errorf("%w: session %s is being purged, its retention having run out; start a new run", ErrPurged, sessionID)
	}
	runID = newID("r")
	// A new run of the session takes the agent's current definition.
	rec := events.Run{RunID: runID, SessionID: sessionID, Agent: latest.Agent, Message: message, RootRunID: runID, Continues: latest.RunID, Owner: latest.Owner,
		Budget: n.ledger.budgetOf(a.Budget), Definition: n.versions.current[latest.Agent]}
	ctx, cancel := detached(ctx)
	defer cancel()
	if err := n.admit(ctx, sessionID, runID); err != nil {
		return "", err
	}
	if _, err := n.runlog.createRun(ctx, rec, last.Sequence); err != nil {
		if errors.Is(err, runtime.ErrConflict) {
			// Another continuation took the session: this run's record can
			// never be written (its ID is new), so its entry goes now
			// rather than after admitGrace.
			if lerr := n.leaveActive(ctx, runID); lerr != nil {
				n.logger.Warn("actors: a refused continuation stays in the active set until a sweep removes it", "run", runID, "err", lerr)
			}
			return "", fmt.Errorf("%w: session %s moved on; try again", ErrBusy, sessionID)
		}
		n.wakeUnknownCreation(err, sessionID, runID)
		return "", err
	}
	n.wake(sessionID, runID, lifecycle.ReasonStarted)
	return runID, nil
}

// Cancel cancels a run (a root, from the API): a durable end event that
// also fences out its writer, and a stop to its actor. Its children are not
// cancelled by it; they finish or are cancelled on their own.
func (n *Node) Cancel(ctx context.Context, sessionID, runID, reason string) (runtime.CallStatus, error) {
	st, err := n.runlog.endRun(ctx, sessionID, runID, runtime.StatusCancelled, reason)
	if err != nil {
		return "", err
	}
	n.stop(sessionID, runID, "cancelled")
	return st.Status, nil
}

// Status returns what the log says of a run: its status, reply and error.
func (n *Node) Status(ctx context.Context, sessionID, runID string) (runtime.CallStatus, *runtime.Reply, string, error) {
	st, err := n.runlog.status(ctx, sessionID, runID)
	return st.Status, st.Reply, st.Error, err
}

// Children lists a run's children in no particular order.
func (n *Node) Children(ctx context.Context, runID string) ([]events.Run, error) {
	var out []events.Run
	err := n.childrenW.entries(ctx, runID, func(_ string, value []byte) error {
		var ch child
		if jsonUnmarshal(value, &ch) != nil {
			return nil
		}
		rec, err := n.runlog.readRun(ctx, ch.SessionID, ch.RunID)
		switch {
		case err != nil:
		case rec != nil:
			out = append(out, *rec)
		default:
			// A child whose session was purged: its record is gone, the
			// child is not (its status reads purged).
			if m, err := n.runlog.last(ctx, events.SessionPurgedSubject(ch.SessionID)); err == nil && m != nil {
				out = append(out, events.Run{RunID: ch.RunID, SessionID: ch.SessionID, ParentRunID: runID, ParentCallID: ch.CallID})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("actors: children of %s: %w", runID, err)
	}
	return out, nil
}

// Result waits until a run finished and returns its status and reply.
func (n *Node) Result(ctx context.Context, sessionID, runID string) (runtime.CallStatus, *runtime.Reply, error) {
	// In a cluster another member may run the run and deliver its
	// completion: its completion or end event, a JetStream publish, also
	// reaches a plain subscription here.
	finished := make(chan *nats.Msg, 8)
	for _, subject := range []string{events.CheckpointSubject(sessionID, runID, true), events.RunEndedSubject(sessionID, runID)} {
		sub, err := n.cfg.Conn.ChanSubscribe(subject, finished)
		if err != nil {
			return "", nil, fmt.Errorf("actors: result of %s: %w", runID, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	var outage time.Duration
	// settle is the next wait after a finished message came and the read
	// that followed still found the run active: a plain subscription gets
	// a JetStream publish when the server receives it, possibly before the
	// stream has stored it, and nothing else may come (the completion goes
	// to the member that consumed it). Read again soon, backing off, until
	// the store has it; a message the stream refused (a fenced-out
	// writer's) ends the backoff at the safety net.
	var settle time.Duration
	var ch chan struct{}
	// A watcher is removed by notify only on the member that handles the
	// run's completion: each loop, and the return, remove this call's own.
	defer func() { n.unwatch(runID, ch) }()
	for {
		n.unwatch(runID, ch)
		ch = make(chan struct{})
		n.mu.Lock()
		n.watchers[runID] = append(n.watchers[runID], ch)
		n.mu.Unlock()
		// A safety net for a lost signal, not the mechanism.
		again := time.Minute
		st, err := n.runlog.status(ctx, sessionID, runID)
		switch {
		case err != nil && (!unavailable(err) || ctx.Err() != nil):
			return "", nil, err
		case err != nil:
			// NATS is out: the run waits the outage out, and so does its
			// caller, reading again (backing off) until it ends.
			outage = min(max(2*outage, 100*time.Millisecond), 10*time.Second)
			again = outage
		case st.Status == runtime.StatusPurged:
			return st.Status, nil, fmt.Errorf("%w: run %s: its session's retention ran out", ErrPurged, runID)
		case !st.Status.Active():
			if st.Error != "" {
				return st.Status, nil, fmt.Errorf("actors: run %s %s: %s", runID, st.Status, st.Error)
			}
			return st.Status, st.Reply, nil
		default:
			outage = 0
			if settle > 0 && settle < resultSettleMax {
				again = settle
				settle *= 2
			}
		}
		if h := n.cfg.Hooks.ResultWaits; h != nil {
			h(runID, again)
		}
		t := n.cfg.Waits.NewTimer(again)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", nil, ctx.Err()
		case <-ch:
		case <-finished:
			settle = resultSettleFirst
		case <-t.C():
		}
		t.Stop()
	}
}

// Bounds of Result's reads after a finished message (settle): the first
// wait, and the wait past which it gives up to the safety net.
const (
	resultSettleFirst = 10 * time.Millisecond
	resultSettleMax   = 5 * time.Second
)

// Usage returns the totals of a root run's budget: its entry in the
// budgets bucket, and, for a root that keeps them in its log, its last
// commit's added (inlog.go). Where a run keeps its budget is read from its
// log, not from the entry's in_log mark: an attempt that kept the budget
// in the bucket and was fenced out at the run's start may have written a
// whole entry all the same.
func (n *Node) Usage(ctx context.Context, rootRunID string) (steps int, inputTokens, outputTokens int64, err error) {
	e, err := n.ledger.usage(ctx, rootRunID)
	found := err == nil
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, 0, err
	}
	// The bucket's whole entry stands when the log cannot say more: the
	// record or the last commit unreadable (a purge under way, a parked
	// run's newer version).
	whole := func(lerr error) (int, int64, int64, error) {
		if found && !e.InLog {
			return e.UsedSteps, e.InputTokens, e.OutputTokens, nil
		}
		if !found && errors.Is(lerr, events.ErrUnknownVersion) {
			return 0, 0, 0, nil // as before the budget could be in the log
		}
		return 0, 0, 0, lerr
	}
	rec, lerr := n.Lookup(ctx, rootRunID)
	if lerr != nil {
		return whole(errors.Join(err, lerr))
	}
	if rec.RootRunID != rec.RunID {
		return 0, 0, 0, fmt.Errorf("actors: usage: %s is not a root run", rootRunID)
	}
	var side *budgetEntry
	if found {
		side = &e
	}
	t, inLog, err := n.usageInLog(ctx, rec, side)
	switch {
	case err != nil:
		return whole(err)
	case !inLog && found:
		return e.UsedSteps, e.InputTokens, e.OutputTokens, nil
	case !inLog:
		return 0, 0, 0, nil // a root run has no entry until its first reservation
	}
	return t.UsedSteps, t.InputTokens, t.OutputTokens, nil
}

// unwatch removes ch from runID's watchers (nil: nothing to remove).
func (n *Node) unwatch(runID string, ch chan struct{}) {
	if ch == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	chs := n.watchers[runID]
	for i, c := range chs {
		if c == ch {
			chs = append(chs[:i], chs[i+1:]...)
			break
		}
	}
	if len(chs) == 0 {
		delete(n.watchers, runID)
	} else {
		n.watchers[runID] = chs
	}
}

func (n *Node) notify(runID string) {
	n.mu.Lock()
	chs := n.watchers[runID]
	delete(n.watchers, runID)
	n.mu.Unlock()
	for _, ch := range chs {
		close(ch)
	}
}

// followActive keeps the active set (n.actives) current with the log
// until the node closes.
func (n *Node) followActive(stream jetstream.Stream) {
	n.actives = newActiveIndex()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	wait := func(d time.Duration) {
		t := n.cfg.Waits.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C():
		case <-ctx.Done():
		}
	}
	go func() {
		defer close(done)
		n.actives.follow(ctx, stream, n.logger, wait)
	}()
	n.closers = append(n.closers, func(context.Context) error {
		cancel()
		<-done
		return nil
	})
}

// activeKV reports whether runs are also written to the active set of
// earlier builds (bucket cairn_active), put at admission and purged at
// their end: while a member of such a build may be in the cluster, which
// sweeps that set alone (and before the node has a member to ask), or
// while the node is pinned below schema level 4 (LedgerVersion: a
// rollback to a build before it stays possible; a build of level 4
// derives the set from the log, so a node pinned at 4 writes none). A node alone, and a cluster whose every
// member derives the set from the log, write nothing for it.
func (n *Node) activeKV() bool {
	if EarlierActiveSet || n.cfg.activeKV || n.cfg.SchemaLevel > 0 && n.cfg.SchemaLevel < events.LedgerVersion {
		return true
	}
	n.mu.Lock() // one lock for the member and its provider (tests swap the provider under it)
	m := n.member
	var provider cluster.ClusterProvider
	if m != nil {
		provider = m.provider
	}
	n.mu.Unlock()
	if m == nil {
		return true
	}
	if p, ok := provider.(interface{ ActiveFromLog() bool }); ok && !p.ActiveFromLog() {
		return true
	}
	n.wroteNoKV.Store(true)
	return false
}

type activeRun struct {
	SessionID string `json:"session_id"`
}

func (n *Node) markActive(ctx context.Context, sessionID, runID string) error {
	if !n.activeKV() {
		return nil
	}
	v, _ := json.Marshal(activeRun{SessionID: sessionID})
	if _, err := n.activeW.put(ctx, runID, v); err != nil {
		return fmt.Errorf("actors: mark %s active: %w", runID, err)
	}
	return nil
}

// leaveActive takes a finished run out of the active set: a purge marker
// that expires (activeMarkerTTL).
func (n *Node) leaveActive(ctx context.Context, runID string) error {
	if !n.activeKV() {
		return nil
	}
	if err := n.activeW.purge(ctx, runID, activeMarkerTTL, 0); err != nil {
		return fmt.Errorf("actors: take %s out of the active set: %w", runID, err)
	}
	return nil
}

// leaveActiveKV takes a finished run out of the earlier builds' active
// set: as leaveActive while that set is written; otherwise only if it
// still has an entry there (one read, and a purge fenced on the entry).
func (n *Node) leaveActiveKV(ctx context.Context, runID string) error {
	if n.activeKV() {
		return n.leaveActive(ctx, runID)
	}
	_, rev, found, err := n.activeW.get(ctx, runID)
	if err != nil {
		return fmt.Errorf("actors: read %s's entry in the active set: %w", runID, err)
	}
	if !found {
		return nil
	}
	if err := n.activeW.purge(ctx, runID, activeMarkerTTL, rev); err != nil && !errors.Is(err, runtime.ErrConflict) {
		return fmt.Errorf("actors: take %s out of the active set: %w", runID, err)
	}
	return nil
}

// track records a child of a run and marks the child active.
func (n *Node) track(ctx context.Context, key string, ch child) error {
	v, _ := json.Marshal(ch)
	if _, err := n.childrenW.put(ctx, key, v); err != nil {
		return fmt.Errorf("actors: track child %s: %w", ch.RunID, err)
	}
	st, err := n.runlog.status(ctx, ch.SessionID, ch.RunID)
	if err != nil || !st.Status.Active() {
		return err
	}
	if h := n.cfg.Hooks.Tracked; h != nil {
		h(ch.SessionID, ch.RunID)
	}
	return n.markActive(ctx, ch.SessionID, ch.RunID)
}

// activeMarkerTTL is how long the purge marker of a run that left the
// active set stays before the server removes it (and with it the last
// trace of the key). Nothing reads it: any TTL would do; a minute leaves
// it visible to whoever inspects the bucket right after a run finishes.
const activeMarkerTTL = time.Minute

// bucketConfig is the configuration of the node's KV bucket name. The
// active set allows message TTLs (LimitMarkerTTL), for the expiring purge
// markers of finished runs; server 2.11 or later.
func bucketConfig(name string, replicas int) jetstream.KeyValueConfig {
	cfg := jetstream.KeyValueConfig{Bucket: name, Storage: jetstream.FileStorage, Replicas: replicas}
	if name == activeBucket {
		cfg.LimitMarkerTTL = activeMarkerTTL
	}
	return cfg
}

const activeBucket = "cairn_active"

func jsonUnmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("actors: decode: %w", err)
	}
	return nil
}

func identity(sessionID, runID string) string { return sessionID + "." + runID }

func (n *Node) request(id string, msg any) bool {
	delay := 50 * time.Millisecond
	for attempt := 0; attempt < 12; attempt++ {
		m := n.awaitMember()
		if m == nil { // closed before it had a member: the next owner wakes what is active
			return false
		}
		if !m.isCurrent() {
			// Possibly removed by the others already: its routing is not to
			// be trusted (a message it delivered to itself would be lost
			// with its actors). Wait until it is current or has rejoined.
			n.sleep(delay)
			delay = min(2*delay, 2*time.Second)
			continue
		}
		// A short timeout per try: after a member died, a cached PID or
		// disthash's owner lookup waits out the whole timeout; protoactor
		// drops the cached PID on a timeout, so the next try looks the
		// owner up again (on the new topology once the member expired).
		res, err := m.cluster.Request(id, runKind, msg, cluster.WithTimeout(3*time.Second))
		if ack, ok := res.(*actorspb.Ack); err == nil && ok && ack.Ok {
			return true
		}
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if closed {
			return false
		}
		n.logger.Debug("actors: request not delivered, retrying", "identity", id, "err", err)
		n.sleep(delay)
		delay = min(2*delay, 2*time.Second)
	}
	n.logger.Warn("actors: request not delivered", "identity", id)
	return false
}

// sleep waits d on the waits' clock (Config.Waits).
func (n *Node) sleep(d time.Duration) {
	t := n.cfg.Waits.NewTimer(d)
	<-t.C()
}

// wakeAt wakes a run at a time (a wait's deadline).
func (n *Node) wakeAt(sessionID, runID string, at time.Time) { n.deadlines.add(sessionID, runID, at) }

// stop tells a run's actor to stop its attempt.
func (n *Node) stop(sessionID, runID, reason string) {
	go n.request(identity(sessionID, runID), &actorspb.Stop{SessionId: sessionID, RunId: runID, Reason: reason})
}

// finishConcurrency is the number of completions handled at once.
const finishConcurrency = 64

// inProgressEvery is how often a completion whose delivery is under way is
// reported in progress: well within the consumer's AckWait (10 s).
const inProgressEvery = 3 * time.Second

// keepInProgress reports msg in progress every inProgressEvery of c until
// the returned stop is called (and has returned): a delivery to a parent
// that takes longer than the consumer's AckWait (a parent on a member
// that is starting, a slow activation) is not redelivered meanwhile.
func keepInProgress(c clock.Clock, msg interface{ InProgress() error }) (stop func()) {
	t := c.NewTicker(inProgressEvery)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-t.C():
				_ = msg.InProgress()
			}
		}
	}()
	return func() {
		t.Stop()
		close(quit)
		<-done
	}
}

func (n *Node) finished(msg jetstream.Msg) {
	subj, err := events.ParseSubject(msg.Subject()) // a completed commit or an end record
	if err != nil || subj.RunID == "" {
		_ = msg.Term()
		return
	}
	sessionID, runID := subj.SessionID, subj.RunID
	if m := n.current(); m == nil || !m.isCurrent() {
		// This node's member is not current (expelled and rejoining, or
		// unable to refresh its entry): it can deliver nothing, and trying
		// held each completion for the request's whole retry (15 s), Nak,
		// and again, while the other members could have delivered it at
		// once (parents woke 30-50 s late after a pause past the member
		// TTL). Back to the consumer, for whichever member pulls it next.
		n.notify(runID)
		n.logger.Debug("actors: a child's end put back: this member is not current", "run", runID)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := n.runlog.readRun(ctx, sessionID, runID)
	if errors.Is(err, events.ErrUnknownVersion) {
		// Written by a newer build: a member of one delivers it; this one
		// looks again only now and then.
		n.logger.Warn("actors: a child's end put back: its record is of a newer schema than this build reads", "run", runID, "err", err)
		_ = msg.NakWithDelay(unreadableRetry)
		return
	}
	if err != nil {
		n.logger.Debug("actors: a child's end put back: its record is unread", "run", runID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	n.unreadable.Delete(runID) // ended: whoever read it
	if rec == nil {            // not a node-managed run
		_ = msg.Ack()
		return
	}
	// Result waiters and the parent read the outcome from the log: they
	// need not wait for the active set's write, which is off the push path
	// (a parent's next step). If a step fails, redelivery repeats them all:
	// a parent told twice wakes twice and finds the same children.
	n.notify(runID)
	if rec.ParentRunID != "" {
		// Delivering to a parent on a member that is paused or gone can
		// take longer than the consumer's AckWait: tell the server the
		// message is in hand, or it is redelivered meanwhile and every copy
		// takes a handling slot (64 parents unreachable stall the node's
		// completions).
		stop := keepInProgress(n.cfg.Clock, msg)
		began := n.cfg.Waits.Now()
		delivered := n.request(identity(rec.ParentSessionID, rec.ParentRunID), &actorspb.ChildFinished{
			SessionId: rec.ParentSessionID, RunId: rec.ParentRunID, ChildSessionId: sessionID, ChildRunId: runID, CallId: rec.ParentCallID,
		})
		stop()
		n.logger.Debug("actors: a child's end told to its parent", "run", runID, "parent", rec.ParentRunID, "delivered", delivered,
			"took", n.cfg.Waits.Now().Sub(began))
		if !delivered {
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	if err := n.leaveActive(ctx, runID); err != nil {
		n.logger.Debug("actors: a child's end put back: the active set is unwritten", "run", runID, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// unreadableRetry is how long a completion this build cannot read (a
// newer schema's) waits before it is delivered again.
const unreadableRetry = 30 * time.Second

// errEnded: the run completed, was cancelled or failed; there is nothing
// to attempt.
var errEnded = errors.New("actors: run ended")

// attempt runs one runtime.Run attempt of a run.
//
// kept is the handle of the run's previous attempt on this actor (nil:
// open one); the handle the attempt used is returned with its outcome.
func (n *Node) attempt(ctx context.Context, m *member, sessionID, runID string, reason lifecycle.Reason, kept runtime.Store) (res *runtime.Result, store runtime.Store, err error) {
	defer n.attempts.Done()
	defer func() {
		// Whatever step the root's wall-clock deadline interrupted (opening
		// the store, a read, the run itself), the attempt ended on the
		// budget: a permanent failure, not a transient one to retry.
		if err != nil && errors.Is(context.Cause(ctx), errWallClockDeadline) {
			res, store, err = nil, nil, fmt.Errorf("%w: wall-clock deadline passed: %w", ErrBudget, err)
		}
	}()
	rec, err := n.runlog.readRun(ctx, sessionID, runID)
	if err != nil {
		return nil, nil, err
	}
	if rec == nil {
		// In the active set with no record: admitted by a start that has
		// not written it yet, or never will (admission.go).
		return nil, nil, n.unrecorded(ctx, sessionID, runID)
	}
	budget := &budgetView{}
	store, dl, err := n.openCreated(ctx, m, rec, kept, budget)
	if err != nil {
		return nil, nil, err
	}
	if store == nil {
		// The run's status and its root's budget are independent reads:
		// made at once, an attempt starts a round trip sooner.
		deadline := n.ledger.deadlineAsync(ctx, rec, budget)
		st, err := n.runlog.status(ctx, sessionID, runID)
		var dlErr error
		dl, dlErr = deadline()
		if err != nil {
			return nil, nil, err
		}
		if !st.Status.Active() {
			// Nothing to attempt. A finished run still in the active set (an
			// Adopt of a finished run wrote it again; a full sweep woke it;
			// an earlier build's entry left when the cluster stopped writing
			// them) leaves it now.
			if err := n.leaveActiveKV(ctx, runID); err != nil {
				return nil, nil, err
			}
			return nil, nil, errEnded
		}
		if dlErr != nil {
			return nil, nil, dlErr
		}
	}
	pin, err := n.versions.resolve(ctx, rec)
	if err != nil {
		return nil, nil, err
	}
	a := &pin.agent
	if !dl.IsZero() {
		if !n.now().Before(dl) {
			return nil, nil, fmt.Errorf("%w: wall-clock deadline %s passed", ErrBudget, dl.UTC().Format(time.RFC3339))
		}
		// On the node's clock, as every deadline in actors (a test moves
		// it); the attempt's NATS calls are bounded on their own.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		t := n.cfg.Clock.AfterFunc(dl.Sub(n.now()), func() { cancel(errWallClockDeadline) })
		defer func() { t.Stop(); cancel(nil) }()
	}
	// A run this node created has had no attempt, and no upgrade to read.
	fresh := store != nil
	if store == nil {
		store = kept
	}
	if store == nil {
		if store, err = m.store.Open(ctx, sessionID, runID); err != nil {
			return nil, nil, err
		}
	}
	var inlog *inLog
	rs, _ := store.(*cjs.RunStore)
	switch {
	case rs != nil && keepsInLog(rec, a, rs, m.store.WriteVersion(), budget):
		// Its commits charge its budget; revision 1 reserves its first
		// step (inlog.go).
		inlog = newInLog(n.ledger, rec, rs, budget)
	default:
		if rs != nil {
			rs.SetLedger(nil) // a handle kept from an earlier attempt
		}
		if s, ok := store.(interface{ AwaitsModel() bool }); ok && s.AwaitsModel() {
			// The attempt's first step is a model request: reserved now,
			// while the attempt starts (a fresh run commits revision 1
			// meanwhile), not after (ledger.reserveEarly).
			n.ledger.reserveEarly(ctx, rec.RootRunID, budget)
		}
	}
	upgradeDue := false
	if !fresh {
		if pin, upgradeDue, err = n.takeUpgrade(ctx, rec, store, pin); err != nil {
			n.refundAhead(rec, budget, inlog)
			return nil, store, err
		}
		a = &pin.agent
	}
	backend := n.cfg.Backend
	if n.cfg.BackendFor != nil {
		backend = n.cfg.BackendFor(*rec)
	}
	in := runtime.Input{
		Definition: a.Definition, Subagents: pin.subs,
		Model:       model.WithUsage(pin.model, recorder{l: n.ledger, root: rec.RootRunID, view: budget, inLog: inlog}),
		ModelLimits: a.Limits, Store: store, Backend: backend, ExecutorFactory: n.cfg.Executors,
		Controller: &controller{n: n, run: rec, version: pin.id, upgradeDue: upgradeDue, budget: budget, inLog: inlog}, Sink: sinkFor(n.cfg.Sink, *rec), Redactor: n.cfg.Redactor,
		Message: rec.Message, Capabilities: pin.caps, IDs: fixedID(runID),
		Clock: clockFunc(n.cfg.Now), Drain: n.drain,
	}
	if reason == lifecycle.ReasonRecovered {
		in.RecoveryNotice = "The node running this task restarted or left the cluster, and this task was resumed. Work committed before that stands; a call whose outcome was lost is marked as having an unknown effect."
	}
	// The root's wall-clock budget ending the attempt is told by the
	// deferred check above (a NATS call timing out reports
	// context.DeadlineExceeded too, and that one is an outage: the cause
	// tells them apart).
	started := time.Now()
	res, err = runtime.Run(ctx, in)
	n.refundAhead(rec, budget, inlog)
	if n.cfg.OnAttempt != nil {
		outcome := attemptOutcome(res, err)
		if err != nil && errors.Is(context.Cause(ctx), errWallClockDeadline) {
			outcome = "failed" // the deferred check above makes it a budget error
		}
		n.cfg.OnAttempt(AttemptEnded{Run: *rec, Reason: reason.String(), Took: time.Since(started), Outcome: outcome})
	}
	return res, store, err
}

// openCreated opens, with no read, a run this node created in a new
// session, on its first attempt here (cjs.Store.OpenCreated): its lease,
// fenced on the record's sequence, lands only while the session holds the
// record alone, so the run has no end and no other holder, and the
// attempt needs neither the status read nor Open's. A fresh root's budget
// has no entry yet (its first reservation makes it): its record's budget
// stands for it, with no read either, and a deadline already passed is
// left to the usual path, which reports it before any write. A child's
// root's deadline is read beside the lease's write: one passed costs the
// child a lease before its attempt ends on the budget. It returns a nil
// store (and nothing written) when the run is not such a run, or its
// session moved on (a cancel, an attempt elsewhere): the attempt then
// reads the log as any other does. dl is the root's wall-clock deadline
// (zero: none).
func (n *Node) openCreated(ctx context.Context, m *member, rec *events.Run, kept runtime.Store, budget *budgetView) (store runtime.Store, dl time.Time, err error) {
	if kept != nil {
		return nil, time.Time{}, nil
	}
	seq, ok := n.runlog.takeCreated(rec.SessionID, rec.RunID)
	if _, runnable := n.versions.of(rec); !ok || !runnable {
		return nil, time.Time{}, nil
	}
	deadline := func() (time.Time, error) { return dl, nil }
	if rec.RootRunID == rec.RunID && rec.Budget != nil {
		e := entryOf(rec.Budget)
		budget.set(e, 0)
		if e.Deadline > 0 {
			dl = time.Unix(0, e.Deadline)
			if !n.now().Before(dl) {
				return nil, time.Time{}, nil // the usual path reports it
			}
		}
	} else {
		deadline = n.ledger.deadlineAsync(ctx, rec, budget)
	}
	h, err := m.store.OpenCreated(ctx, rec.SessionID, rec.RunID, seq)
	dl, dlErr := deadline()
	switch {
	case errors.Is(err, runtime.ErrConflict):
		return nil, time.Time{}, nil
	case err != nil:
		return nil, time.Time{}, err
	case dlErr != nil:
		return nil, time.Time{}, dlErr
	}
	return h, dl, nil
}

// refundAhead gives back a step the attempt reserved ahead (with the
// write that recorded its last response: ledger.go; with the commit that
// left the run in the model phase: inlog.go) and did not take, because it
// stopped before its next model step: drained, failed, its lease lost.
// One write, made only then (with a budget in the log, it also charges
// tokens no commit carried). A crash leaves the step spent, as a crash
// after any reservation does (C35); a refund that fails is logged and the
// step stays spent.
func (n *Node) refundAhead(rec *events.Run, budget *budgetView, inlog *inLog) {
	ctx, cancel := context.WithTimeout(context.Background(), refundTimeout)
	defer cancel()
	if inlog != nil {
		if err := inlog.end(ctx); err != nil {
			n.logger.Warn("actors: a step reserved ahead and not taken stays spent, or tokens reported are not charged", "run", rec.RunID, "err", err)
		}
		return
	}
	if err := n.ledger.giveBack(ctx, rec.RootRunID, budget); err != nil {
		n.logger.Warn("actors: a step reserved ahead and not taken stays spent", "run", rec.RunID, "root", rec.RootRunID, "err", err)
	}
}

// refundTimeout bounds the write of a refund.
const refundTimeout = 10 * time.Second

// AttemptEnded is one attempt's end, as Config.OnAttempt sees it.
type AttemptEnded struct {
	Run events.Run
	// Reason is why it started: started, woken, recovered, retried ...
	Reason string
	// Took is its wall-clock time, from the run loop's start to its end.
	Took time.Duration
	// Outcome: completed, needs_input (the run ended with that reply),
	// parked (waiting for children), drained (the node is stopping),
	// fenced (another member took the run over), cancelled (the attempt
	// was cancelled), failed (the run failed for good: a budget, input or
	// contract error) or error (a transient failure: retried).
	Outcome string
}

func attemptOutcome(res *runtime.Result, err error) string {
	switch {
	case err == nil && res != nil && res.Reply != nil:
		return string(runtime.RunStatus(runtime.StatusCompleted, res.Reply))
	case errors.Is(err, runtime.ErrWaiting) || err == nil && res != nil && res.Waiting:
		return "parked"
	case errors.Is(err, runtime.ErrDrained):
		return "drained"
	case errors.Is(err, errUpgradeDue):
		return "upgrading"
	case errors.Is(err, events.ErrUnknownVersion):
		return "unreadable"
	case errors.Is(err, runtime.ErrLeaseLost):
		return "fenced"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case err != nil && permanent(err):
		return "failed"
	case err != nil:
		return "error"
	}
	return "completed"
}

// errWallClockDeadline is the cause of an attempt cancelled at its root's
// wall-clock deadline.
var errWallClockDeadline = errors.New("actors: the root's wall-clock deadline passed")

// errPermanent marks attempt errors no retry can fix.
var errPermanent = errors.New("actors: permanent failure")

type fixedID string

func (f fixedID) NewID() string { return string(f) }

type clockFunc func() time.Time

func (c clockFunc) Now() time.Time { return c() }

func sinkFor(f func(events.Run, runtime.SinkEvent), rec events.Run) runtime.Sink {
	return runtime.SinkFunc(func(_ context.Context, ev runtime.SinkEvent) {
		if f != nil {
			f(rec, ev)
		}
	})
}

// Lookup returns a run's record (its session, agent, parent) by run ID.
func (n *Node) Lookup(ctx context.Context, runID string) (*events.Run, error) {
	if err := events.ValidID(runID); err != nil {
		return nil, err
	}
	var r events.Run
	found, err := n.runlog.lastPayload(ctx, events.RunCreatedAnySession(runID), &r)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: run %s", ErrNotFound, runID)
	}
	return &r, nil
}
