package actors

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/actors/sweep"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/clock"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// ClusterConfig places run actors across the members of a protoactor-go
// cluster. Each run is a virtual actor placed by its identity (disthash);
// which member runs it is a cache decision, and the log's fencing decides
// who may write.
type ClusterConfig struct {
	// Provider returns the membership provider of a new member; required.
	// It is called at Start and again each time the member is expelled
	// (a provider that implements Expeller): protoactor-go blocks an
	// expelled member's ID for good, so the node joins again as a new
	// member with a new ID and a new provider.
	Provider func() (cluster.ClusterProvider, error)
	// Host the member's remote (gRPC) listens on; "" means 127.0.0.1.
	Host string
	// Port of the member's remote; zero picks a free port.
	Port int
	// AdvertisedHost is the address other members dial, when it differs
	// from Host (0.0.0.0, NAT); "" means Host.
	AdvertisedHost string
	// Name of this node; member IDs are Name-<random>. "" means "node".
	Name string
	// TLS, when set, secures the members' remote (gRPC) both ways with
	// mutual TLS: the member serves its Certificates and requires a peer
	// certificate signed by ClientCAs (RootCAs when nil), and dials with
	// its Certificates, checking the peer's against RootCAs. A member
	// without a certificate of that CA cannot send this one a message.
	// Nil means clear text without authentication (loopback and private
	// networks only).
	TLS *tls.Config
	// SweepInterval is how often the member also wakes, between topology
	// changes, the active runs it owns whose lease holder is no longer a
	// member (a wake that was lost), or is another member that has held it
	// for two intervals without it running here (a handoff that did not
	// arrive); zero means 30s.
	SweepInterval time.Duration
}

func (c *ClusterConfig) validate() error {
	switch {
	case c.Provider == nil:
		return errors.New("actors: Config.Cluster.Provider is required")
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("actors: Config.Cluster.Port: %d, want 0-65535", c.Port)
	case c.SweepInterval < 0:
		return fmt.Errorf("actors: Config.Cluster.SweepInterval: %s, want at least 0", c.SweepInterval)
	case c.Name != "" && events.ValidID(c.Name) != nil:
		return fmt.Errorf("actors: Config.Cluster.Name: %q: %v", c.Name, events.ValidID(c.Name))
	}
	return nil
}

// Expeller is implemented by a cluster provider that can lose this
// member's membership while the process lives on (a pause or a partition
// longer than the membership TTL): Expelled is closed then.
type Expeller interface {
	Expelled() <-chan struct{}
}

// Membership is implemented by a cluster provider that knows whether this
// member's membership is fresh: Fresh is false when it may already have
// been removed by the others (a pause or a partition longer than the TTL),
// and the member then routes no messages.
type Membership interface {
	Fresh() bool
}

func (m *member) isCurrent() bool {
	c, ok := m.provider.(Membership)
	return !ok || c.Fresh()
}

// member is one incarnation of this node in the protoactor-go cluster. Its
// ID is the lease holder of every run it opens, so "the run's owner is
// gone" is "the run's lease holder is not a member".
type member struct {
	stopOnce sync.Once
	id       string
	addr     string
	system   *actor.ActorSystem
	cluster  *cluster.Cluster
	provider cluster.ClusterProvider
	store    *cjs.Store // opens runs with this member's ID as the holder
	// ctx ends when the member stops: its attempts are cancelled.
	ctx    context.Context
	cancel context.CancelFunc
	sweeps chan struct{}
	// full asks the next sweep to wake every run this member owns, not
	// only those whose owner is gone.
	full atomic.Bool

	mu      sync.Mutex
	members map[string]*cluster.Member // the topology protoactor-go published last
	ready   chan struct{}              // closed when the topology first contains this member
	local   map[string]bool            // identities with an actor on this member
}

// startMember starts a new member: its actor system, its store handle,
// its cluster membership.
func (n *Node) startMember(ctx context.Context) (*member, error) {
	m := &member{sweeps: make(chan struct{}, 1), members: map[string]*cluster.Member{}, ready: make(chan struct{}), local: map[string]bool{}}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return n.logger.With("component", "protoactor") }))
	name := "node"
	cc := n.cfg.Cluster
	if cc != nil && cc.Name != "" {
		name = cc.Name
	}
	// A readable ID; the random part makes every incarnation new.
	m.system.ID = name + "-" + m.system.ID
	m.id = m.system.ID
	n.memberIDs.Store(m.id, true)
	scfg := n.cfg.Store
	scfg.Holder = m.id
	var err error
	if m.store, err = cjs.New(ctx, n.cfg.Conn, scfg); err != nil {
		m.cancel()
		return nil, err
	}
	m.system.EventStream.Subscribe(func(ev any) {
		if topo, ok := ev.(*cluster.ClusterTopology); ok {
			m.onTopology(topo)
		}
	})
	kind := cluster.NewKind(runKind, actor.PropsFromProducer(func() actor.Actor { return &runActor{n: n, m: m} }))
	host, port := "127.0.0.1", 0
	var ropts []remote.ConfigOption
	if cc == nil {
		m.provider = soloProvider{}
	} else {
		if cc.Host != "" {
			host = cc.Host
		}
		port = cc.Port
		if cc.AdvertisedHost != "" {
			ropts = append(ropts, remote.WithAdvertisedHost(net.JoinHostPort(cc.AdvertisedHost, strconv.Itoa(port))))
		}
		if m.provider, err = cc.Provider(); err != nil {
			m.cancel()
			_ = m.store.Close(context.Background())
			return nil, fmt.Errorf("actors: cluster provider: %w", err)
		}
	}
	if cc != nil && cc.TLS != nil {
		srv, cli := cc.TLS.Clone(), cc.TLS.Clone()
		srv.ClientAuth = tls.RequireAndVerifyClientCert
		if srv.ClientCAs == nil {
			srv.ClientCAs = srv.RootCAs
		}
		ropts = append(ropts, remote.WithServerOptions(grpc.Creds(credentials.NewTLS(srv))),
			remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cli))))
	}
	rcfg := remote.Configure(host, port, ropts...)
	rcfg.MaxRetryCount = 2 // a dead peer costs seconds of retries otherwise
	ccfg := cluster.Configure("cairn", m.provider, disthash.New(), rcfg, cluster.WithKinds(kind), cluster.WithRequestTimeout(10*time.Second),
		// Gossip's own heartbeat expiry blocks a member for good (after a
		// GC pause, say); the membership provider alone decides who is
		// gone, so gossip's verdict is pushed far out.
		cluster.WithHeartbeatExpiration(24*time.Hour))
	m.cluster = cluster.New(m.system, ccfg)
	if err := startCluster(m.cluster); err != nil {
		m.cancel()
		m.system.Shutdown()
		_ = m.store.Close(context.Background())
		return nil, err
	}
	m.addr = m.system.Address()
	return m, nil
}

// startCluster starts the member; protoactor-go panics when the provider
// fails to start.
func startCluster(c *cluster.Cluster) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("actors: start cluster member: %v", r)
		}
	}()
	c.StartMember()
	return nil
}

// onTopology runs inside protoactor-go's MemberList (under its lock): it
// only records the members and signals the sweep.
func (m *member) onTopology(topo *cluster.ClusterTopology) {
	m.mu.Lock()
	m.members = make(map[string]*cluster.Member, len(topo.Members))
	for _, mem := range topo.Members {
		m.members[mem.Id] = mem
	}
	if _, ok := m.members[m.id]; ok {
		select {
		case <-m.ready:
		default:
			close(m.ready)
		}
	}
	m.mu.Unlock()
	if len(topo.Left) > 0 || len(topo.Joined) > 0 {
		// A membership change is when a message can be lost: a member that
		// was paused past its TTL may still have taken (and acknowledged)
		// a completion for a run that another member now holds, parked.
		// Every run whose owner moved or may have missed a message is
		// woken; a parked run's attempt re-reads its durable state and
		// parks again if nothing changed.
		m.full.Store(true)
		m.sweepSoon()
	}
}

func (m *member) sweepSoon() {
	select {
	case m.sweeps <- struct{}{}:
	default:
	}
}

func (m *member) setLocal(identity string, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if on {
		m.local[identity] = true
	} else {
		delete(m.local, identity)
	}
}

// stop cancels the member's attempts and leaves the cluster: the
// provider's entry first (protoactor-go's non-graceful shutdown never
// calls it), then the actor system.
//
// It runs once: a member being replaced after an expulsion (rejoin) may be
// stopped by Close too, and protoactor-go's ActorSystem.Shutdown panics
// the second time (close of a closed channel). A second caller waits for
// the first to finish.
// withoutPause is whether a member's protoactor-go cluster shuts down as
// protoactor-go's graceful Shutdown does but without its 2 s sleep for
// identity ownership to move to the other members: a member alone has
// none to hand over to (every CLI command's exit waited those 2 s).
func withoutPause(p cluster.ClusterProvider, graceful bool) bool {
	_, alone := p.(soloProvider)
	return graceful && alone
}

// shutdownWithoutPause is cluster.Shutdown(true), step for step in its
// order, less the sleep (its MemberList.stopMemberList is a no-op in the
// version go.mod pins). Shutdown(false) would not do: it stops neither
// gossip nor the endpoint manager, and kills the gRPC server without
// waiting for it, which then races the next member's start on grpclog's
// global logger.
func shutdownWithoutPause(c *cluster.Cluster) {
	c.Gossip.SetState(cluster.GracefullyLeftKey, &emptypb.Empty{})
	c.ActorSystem.Shutdown()
	_ = c.Config.ClusterProvider.Shutdown(true)
	c.IdentityLookup.Shutdown()
	c.Gossip.Shutdown()
	c.Remote.Shutdown(true)
}

func (m *member) stop(graceful bool) {
	m.stopOnce.Do(func() {
		m.cancel()
		if err := m.provider.Shutdown(graceful); err != nil {
			m.system.Logger().Warn("actors: cluster provider shutdown", "err", err)
		}
		if withoutPause(m.provider, graceful) {
			shutdownWithoutPause(m.cluster)
		} else {
			m.cluster.Shutdown(graceful)
		}
		// The member's store (its holder is the member) goes with it: a
		// node that outlives many members (expelled, started again) must
		// not keep a reply subscription for each.
		if err := m.store.Close(context.Background()); err != nil {
			m.system.Logger().Warn("actors: close the member's store", "err", err)
		}
	})
}

// run is the member's life: sweep once it sees itself in the topology,
// again on every topology change that lost a member and every
// SweepInterval (cluster mode); start over as a new member when expelled.
//
// expelled is m's provider's (expelledOf), read by the caller before the
// goroutine starts: the provider is m's from its start, and run reads
// nothing of it after.
func (n *Node) run(m *member, expelled <-chan struct{}) {
	var tick <-chan time.Time
	if n.cfg.Cluster != nil {
		t := n.cfg.Clock.NewTicker(n.sweepInterval())
		defer t.Stop()
		tick = t.C()
	}
	select {
	case <-m.ready:
	case <-m.ctx.Done():
		return
	case <-expelled:
	}
	// The first sweep waits for the active set to have read the log as it
	// stood at the node's start (a large log takes a while); an expulsion
	// meanwhile is heard.
	select {
	case <-n.actives.ready:
		m.sweepSoon()
	case <-m.ctx.Done():
		return
	case <-expelled:
	}
	// A sweep that failed, or could not read all it needed, is tried
	// again with backoff, as the same kind (first, full): on a node alone
	// the first sweep is the only one, and the runs of the node's previous
	// incarnation wait on it.
	first := true
	backoff := sweepRetryMin
	var retry clock.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-expelled:
			n.rejoin(m)
			return
		case <-m.sweeps:
		case <-tick:
		}
		full := m.full.Swap(false)
		ctx, cancel := context.WithTimeout(m.ctx, 2*time.Minute)
		err := n.sweep(ctx, m, first, full)
		cancel()
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			n.logger.Warn("actors: sweep; trying again", "member", m.id, "in", backoff, "err", err)
			if full {
				m.full.Store(true)
			}
			if retry != nil {
				retry.Stop()
			}
			retry = n.cfg.Clock.AfterFunc(backoff, m.sweepSoon)
			backoff = min(2*backoff, sweepRetryMax)
			continue
		}
		backoff = sweepRetryMin
		first = false
	}
}

// The backoff of a sweep that failed.
const (
	sweepRetryMin = time.Second
	sweepRetryMax = 30 * time.Second
)

// rejoin replaces an expelled member: its actors stop (the runs they held
// are already owned elsewhere; anything they still write is fenced out by
// the new owner's lease), and a new member joins under a new ID.
func (n *Node) rejoin(old *member) {
	n.logger.Warn("actors: this member was expelled from the cluster; joining again as a new member", "member", old.id)
	old.stop(false)
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if closed {
			return
		}
		// Each try bounded well below a minute: a try whose request the
		// server took and never answered (JetStream still recovering
		// after this node's pause) held the rejoin for its whole timeout,
		// a minute, where the next try a few seconds on would have joined.
		ctx, cancel := context.WithTimeout(context.Background(), rejoinTry)
		m, err := n.startMember(ctx)
		cancel()
		if err == nil {
			n.mu.Lock()
			if n.closed { // Close ran meanwhile: it stopped the old member only
				n.mu.Unlock()
				m.stop(true)
				return
			}
			n.member = m
			n.mu.Unlock()
			n.logger.Info("actors: joined the cluster again", "member", m.id, "was", old.id)
			go n.run(m, expelledOf(m.provider))
			return
		}
		n.logger.Warn("actors: rejoin failed; retrying", "err", err, "in", delay)
		n.sleep(delay) // Config.Waits, not Config.Clock: it waits for a transport
	}
}

// rejoinTry bounds one try to join again after an expulsion.
const rejoinTry = 20 * time.Second

// sweepInterval is how often a member of a cluster sweeps.
func (n *Node) sweepInterval() time.Duration {
	if cc := n.cfg.Cluster; cc != nil && cc.SweepInterval > 0 {
		return cc.SweepInterval
	}
	return 30 * time.Second
}

// sweep wakes every active run this member owns (by rendezvous on the
// current topology): all of them when full, else those that have no actor
// here and whose lease holder is not a member (runs of a member that died,
// or of this node before a restart) or is another member that has held it
// for two sweeps (a handoff that did not arrive). A run that has no lease
// yet was created but never activated; it is woken by the member's first
// sweep, and later ones once it is older than a wake takes to arrive (its
// creator may have died before waking it). A run in the set with no record
// (its start died between admitting it and writing the record) is not
// woken: its entry is removed once older than admitGrace, with nothing
// written to the log.
func (n *Node) sweep(ctx context.Context, m *member, first, full bool) (err error) {
	if h := n.cfg.Hooks.Sweep; h != nil {
		if err := h(first, full); err != nil {
			return err
		}
	}
	members, in := m.topology()
	if !in {
		return nil // not in the topology (yet): others own everything
	}
	live := make(map[string]bool, len(members))
	for _, mem := range members {
		live[mem.ID] = true
	}
	place := sweep.Place(members)
	// The active set is the log's (activeindex.go), once the index has
	// read the log as it stood when the node started (run waits for it
	// before the first sweep); until then no sweep can tell which runs
	// are active.
	if !n.actives.isReady() {
		return errors.New("actors: sweep: the active set is still reading the log")
	}
	var mine []activeEntry
	seen := map[string]bool{}
	var fromLog []activeEntry
	if !EarlierActiveSet { // a build standing for an earlier one sweeps the bucket alone
		fromLog = n.actives.active()
	}
	for _, a := range fromLog {
		id := identity(a.session, a.run)
		seen[id] = true
		if place.Owner(id) == m.addr {
			mine = append(mine, a)
		}
	}
	// And the earlier builds' set: runs admitted by a member of one whose
	// record is not written yet, and entries left behind.
	var stale []staleMarker
	inKV := map[string]bool{}
	err = n.activeW.scan(ctx, "", func(run string, value []byte) error {
		var a activeRun
		if jsonUnmarshal(value, &a) != nil {
			return nil
		}
		id := identity(a.SessionID, run)
		inKV[id] = true
		if !seen[id] && place.Owner(id) == m.addr {
			mine = append(mine, activeEntry{session: a.SessionID, run: run})
		}
		return nil
	}, func(run string, rev uint64) {
		if len(stale) < staleMarkersPerSweep && place.Owner(run) == m.addr {
			stale = append(stale, staleMarker{run, rev})
		}
	})
	if err != nil {
		return fmt.Errorf("actors: sweep: read active runs: %w", err)
	}
	woken, unread := 0, 0
	// The log's times are the server's: ages are only as good as the
	// clocks agree.
	sw := sweep.Sweep{Self: m.id, Live: live, Now: n.cfg.Clock.Now(), Interval: n.sweepInterval(), UnleasedGrace: unleasedGrace, First: first, Full: full}
	for _, a := range mine {
		m.mu.Lock()
		r := sweep.Run{Local: m.local[identity(a.session, a.run)]}
		m.mu.Unlock()
		v := sw.Decide(r, false)
		if v == sweep.NeedLease {
			var err error
			if r, err = n.sweepFacts(ctx, a, r); err != nil || r.CreatedUnknown {
				n.logger.Debug("actors: sweep: read lease", "run", a.run, "err", err)
				unread++
				continue
			}
			v = sw.Decide(r, true)
		}
		switch v {
		case sweep.Wake:
			woken++
			n.wake(a.session, a.run, lifecycle.ReasonRecovered)
		case sweep.Settle:
			// Admitted with no record (yet): nothing to attempt, and
			// nothing to write. Its entry goes once older than admitGrace
			// (admission.go); a client's retry may write the record before
			// that.
			if _, _, err := n.settleUnrecorded(ctx, a.session, a.run); err != nil {
				n.logger.Debug("actors: sweep: a run with no record", "run", a.run, "err", err)
			}
		}
	}
	if unread > 0 {
		// What was read is acted on; the sweep is tried again for the rest.
		defer func() {
			err = errors.Join(err, fmt.Errorf("actors: sweep: %d of %d runs could not be read", unread, len(mine)))
		}()
	}
	if woken > 0 {
		n.logger.Info("actors: swept runs whose owner is gone", "member", m.id, "woken", woken, "owned", len(mine))
	}
	if n.activeKV() && n.wroteNoKV.Load() {
		// A member of an earlier build is in the cluster again, after this
		// node stopped writing the bucket: it sweeps the bucket alone, so
		// every active run goes back in it, those admitted meanwhile
		// included.
		var missing []activeEntry
		for _, a := range fromLog {
			if !inKV[identity(a.session, a.run)] {
				missing = append(missing, a)
			}
		}
		if len(missing) > 0 {
			m.aside(&n.backfilling, func(ctx context.Context) { n.backfillActive(ctx, missing) })
		}
	}
	if len(stale) > 0 {
		m.aside(&n.purging, func(ctx context.Context) { n.purgeStale(ctx, stale) })
	}
	return nil
}

type activeEntry struct{ session, run string }

// aside runs f off the member's loop, for two minutes at most, unless the
// last one of its kind (busy) still runs: one at a time.
func (m *member) aside(busy *atomic.Bool, f func(context.Context)) {
	if !busy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer busy.Store(false)
		ctx, cancel := context.WithTimeout(m.ctx, 2*time.Minute)
		defer cancel()
		f(ctx)
	}()
}

// sweepFacts reads what the sweep's decision needs of a run with no actor
// here: its lease and, when it has none, its creation record.
func (n *Node) sweepFacts(ctx context.Context, a activeEntry, r sweep.Run) (sweep.Run, error) {
	var l events.Lease
	lease, err := n.runlog.lastDecoded(ctx, events.RunLease(a.session, a.run), &l)
	if err != nil {
		return r, err
	}
	if lease != nil {
		r.Lease = &sweep.Lease{Holder: l.Holder, At: lease.Time}
		return r, nil
	}
	created, err := n.runlog.last(ctx, events.RunCreatedSubject(a.session, a.run))
	switch {
	case err != nil:
		r.CreatedUnknown = true
	case created == nil:
		r.NoRecord = true
	default:
		r.Created = created.Time
	}
	return r, nil
}

// staleMarkersPerSweep bounds the old delete markers one sweep replaces.
const staleMarkersPerSweep = 5000

// staleMarker is a delete marker of the active set and its revision.
type staleMarker struct {
	run string
	rev uint64
}

// purgeStale replaces the active set's delete markers left by earlier
// builds (which kept one for good per finished run) with expiring purge
// markers, so the set shrinks to its active runs. Each member takes the
// keys it owns by rendezvous; each purge is fenced on the marker's
// revision, so a key written since is left alone. A few at a time: they
// share the node's in-flight count with its runs' commits.
func (n *Node) purgeStale(ctx context.Context, markers []staleMarker) {
	var purged, failed atomic.Int64
	parallel(len(markers), 8, func(i int) {
		if ctx.Err() != nil { // the member stopped, or the time is up: the next sweep goes on
			return
		}
		if err := n.activeW.purge(ctx, markers[i].run, activeMarkerTTL, markers[i].rev); err != nil {
			failed.Add(1)
		} else {
			purged.Add(1)
		}
	})
	n.logger.Info("actors: sweep: replaced old delete markers of the active set", "purged", purged.Load(), "failed", failed.Load(), "of", len(markers))
}

// backfillActive puts runs of the log's active set in the earlier builds'
// bucket, a few at a time (they share the node's in-flight count with its
// runs' commits). Every member does so for every run missing there: a
// member of an earlier build owns some of them, and only reads the bucket.
// A run that ended meanwhile and is put back is taken out by its next
// activation (attempt), as any finished run's entry is.
func (n *Node) backfillActive(ctx context.Context, runs []activeEntry) {
	var put, failed atomic.Int64
	parallel(len(runs), 8, func(i int) {
		if ctx.Err() != nil { // the member stopped, or the time is up: the next sweep goes on
			return
		}
		if err := n.markActive(ctx, runs[i].session, runs[i].run); err != nil {
			failed.Add(1)
		} else {
			put.Add(1)
		}
	})
	n.logger.Info("actors: sweep: put the active runs back in the earlier builds' active set, for a member of one", "put", put.Load(), "failed", failed.Load(), "of", len(runs))
}

// unleasedGrace is how long a created run may go without a lease before a
// sweep wakes it.
const unleasedGrace = 15 * time.Second

// expelledOf is the channel a provider closes when it expels its member
// (Expeller); nil when it never does.
func expelledOf(p cluster.ClusterProvider) <-chan struct{} {
	if e, ok := p.(Expeller); ok {
		return e.Expelled()
	}
	return nil
}

// topology is the topology protoactor-go published last, as sweep
// places identities on it, and whether this member is in it.
func (m *member) topology() (members []sweep.Member, in bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	members = make([]sweep.Member, 0, len(m.members))
	for id, mem := range m.members {
		members = append(members, sweep.Member{ID: id, Addr: mem.Address()})
	}
	_, in = m.members[m.id]
	return members, in
}
