package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/nats-io/nats.go/jetstream"
)

// KV is the part of a JetStream KeyValue bucket the provider uses;
// jetstream.KeyValue implements it. Tests wrap it to inject faults.
type KV interface {
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
	WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

var _ KV = jetstream.KeyValue(nil)

// BucketConfig configures the membership bucket.
type BucketConfig struct {
	// Name of the bucket; "" means cairn_members.
	Name string
	// TTL after which an entry that was not refreshed expires; required.
	// Every member must use the same TTL (the bucket has one).
	TTL time.Duration
	// Replicas of the bucket: 1, 3 or 5; zero means 1.
	Replicas int
}

// DefaultBucket is the membership bucket's default name.
const DefaultBucket = "cairn_members"

// Bucket creates or updates the membership bucket: memory storage (the
// membership is ephemeral; a member whose entry vanished rejoins), the
// TTL as the bucket's max age, and limit markers so that watchers see an
// expiry.
func Bucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultBucket
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("cluster: BucketConfig.TTL: %s, want at least 1s", cfg.TTL)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Name, Description: "Cairn cluster members", TTL: cfg.TTL, LimitMarkerTTL: cfg.TTL,
		Storage: jetstream.MemoryStorage, Replicas: cfg.Replicas, History: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: bucket %s: %w", cfg.Name, err)
	}
	return kv, nil
}

// Config configures a Provider.
type Config struct {
	// KV is the membership bucket (see Bucket); required.
	KV KV
	// TTL is the bucket's entry TTL; required.
	TTL time.Duration
	// Heartbeat is how often this member refreshes its entry; zero means
	// TTL/3. It must be shorter than TTL.
	Heartbeat time.Duration
	// Resync is how often the complete list is pushed again even if nothing
	// changed; zero means Heartbeat.
	Resync time.Duration
	// Name is a readable name of this node, kept in its entry; optional.
	Name string
	// Reads is the newest version of the log's schema this member reads,
	// announced in its entry: the cluster writes the version every member
	// reads (Level). Zero means 1, as an entry of a build that did not
	// announce it.
	Reads int
	// KVActive announces a member that keeps writing the active set of
	// earlier builds (bucket cairn_active): one whose node is pinned to an
	// earlier schema level, so that a rollback to such a build finds every
	// run in the set it sweeps.
	KVActive bool
	// RaiseAfter is how long every member must have read a newer version
	// before Level rises to it; zero means 10 TTLs. A member of an older
	// build that is only briefly out (paused past the TTL, cut off) comes
	// back within it and finds nothing it cannot read.
	RaiseAfter time.Duration
	// Now is the clock of RaiseAfter; nil means time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case c.KV == nil:
		return errors.New("cluster: Config.KV is required")
	case c.TTL <= 0:
		return errors.New("cluster: Config.TTL is required")
	case c.Heartbeat < 0 || c.Heartbeat >= c.TTL:
		return fmt.Errorf("cluster: Config.Heartbeat: %s, want more than 0 and less than TTL %s", c.Heartbeat, c.TTL)
	case c.Resync < 0:
		return fmt.Errorf("cluster: Config.Resync: %s, want at least 0", c.Resync)
	case c.Reads < 0:
		return fmt.Errorf("cluster: Config.Reads: %d, want at least 0", c.Reads)
	case c.RaiseAfter < 0:
		return fmt.Errorf("cluster: Config.RaiseAfter: %s, want at least 0", c.RaiseAfter)
	}
	return nil
}

// entry is a member's value in the bucket.
type entry struct {
	ID    string   `json:"id"`
	Name  string   `json:"name,omitempty"`
	Host  string   `json:"host"`
	Port  int      `json:"port"`
	Kinds []string `json:"kinds"`
	// Reads is the newest schema version the member reads; 0 (an entry
	// without it) is 1.
	Reads int `json:"reads,omitempty"`
	// LogActive says the member derives the active set from the log (an
	// entry without it is of a build that sweeps the bucket cairn_active
	// alone).
	LogActive bool `json:"log_active,omitempty"`
	// Level is the schema level the member has reached (Level), once above
	// 1: a member that starts beside members that all announce one starts
	// at it, rather than at 1.
	Level int `json:"level,omitempty"`

	// seen is when the bucket stored the revision this was read from,
	// and rev that revision.
	seen time.Time
	rev  uint64
}

func (e entry) member() *pcluster.Member {
	return &pcluster.Member{Id: e.ID, Host: e.Host, Port: int32(e.Port), Kinds: slices.Clone(e.Kinds)}
}

// Provider is a protoactor-go ClusterProvider on a JetStream KV bucket. One
// Provider serves one member for its life: after Shutdown, or once
// Expelled, start a new member with a new Provider.
type Provider struct {
	cfg Config
	log *slog.Logger

	topo   Topology
	self   entry
	value  []byte
	cancel context.CancelFunc
	loops  sync.WaitGroup

	mu       sync.Mutex
	rev      uint64
	beat     time.Time        // the last time the entry was known refreshed
	members  map[string]entry // the last complete list the bucket gave
	synced   bool             // members holds a complete snapshot
	stopping bool
	pushed   string // signature of the last pushed list
	// level is what Level last answered, logActive what ActiveFromLog
	// did (as 0 or 1).
	level, logActive ratchet
	// inherited is set once Level has looked at the level the other
	// members announce (at the first complete list); levelLogged once it
	// has logged the level (it logs each change after).
	inherited, levelLogged bool

	pushMu    sync.Mutex // one UpdateClusterTopology at a time
	expelled  chan struct{}
	expelOnce sync.Once
	stopOnce  sync.Once
}

var _ pcluster.ClusterProvider = (*Provider)(nil)

// NewProvider validates cfg and returns a provider for one member.
func NewProvider(cfg Config) (*Provider, error) {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = cfg.TTL / 3
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Resync == 0 {
		cfg.Resync = cfg.Heartbeat
	}
	if cfg.RaiseAfter == 0 {
		cfg.RaiseAfter = 10 * cfg.TTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{cfg: cfg, log: log, members: map[string]entry{}, expelled: make(chan struct{})}, nil
}

// Topology is what a provider gives each complete member list to:
// protoactor-go's MemberList in a node; a recorder in the tests that run
// the provider without an actor system (under the race detector, which
// protoactor-go's cluster does not pass).
type Topology interface {
	UpdateClusterTopology(members pcluster.Members)
}

// StartMember creates this member's entry and starts the heartbeat, the
// watch and the periodic resync (Join, on the cluster's address, kinds and
// member list).
func (p *Provider) StartMember(c *pcluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("cluster: member address: %w", err)
	}
	return p.Join(Self{ID: c.ActorSystem.ID, Host: host, Port: port, Kinds: c.GetClusterKinds()}, c.MemberList)
}

// Self is the member a provider serves: its ID, its address and the
// kinds of actor it hosts.
type Self struct {
	ID    string
	Host  string
	Port  int
	Kinds []string
}

// Join creates this member's entry and starts the heartbeat, the watch
// and the periodic resync, which give each complete member list to topo.
func (p *Provider) Join(self Self, topo Topology) error {
	kinds := slices.Clone(self.Kinds)
	sort.Strings(kinds)
	p.topo = topo
	p.self = entry{ID: self.ID, Name: p.cfg.Name, Host: self.Host, Port: self.Port, Kinds: kinds, Reads: p.cfg.Reads, LogActive: !p.cfg.KVActive}
	var err error
	if p.value, err = json.Marshal(p.self); err != nil {
		return fmt.Errorf("cluster: encode entry: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	cctx, ccancel := context.WithTimeout(ctx, p.cfg.TTL)
	rev, err := p.cfg.KV.Create(cctx, p.self.ID, p.value)
	ccancel()
	if err != nil {
		cancel()
		return fmt.Errorf("cluster: create entry %s: %w", p.self.ID, err)
	}
	p.mu.Lock()
	p.rev, p.beat = rev, time.Now()
	p.mu.Unlock()
	p.log.Info("cluster: member joined the bucket", "id", p.self.ID, "name", p.cfg.Name, "address", fmt.Sprintf("%s:%d", self.Host, self.Port))
	p.loops.Add(3)
	go p.heartbeat(ctx)
	go p.watch(ctx)
	go p.resync(ctx)
	return nil
}

// StartClient is not supported: every Cairn node is a member.
func (p *Provider) StartClient(*pcluster.Cluster) error {
	return errors.New("cluster: the KV provider has no client mode")
}

// Shutdown deletes this member's entry first (the others move its actors
// at once), then stops the heartbeat and the watch. It is idempotent.
func (p *Provider) Shutdown(bool) error {
	var err error
	p.stopOnce.Do(func() {
		p.mu.Lock()
		p.stopping = true
		p.mu.Unlock()
		if p.cancel == nil {
			return
		}
		select {
		case <-p.expelled: // the entry is gone already
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if derr := p.cfg.KV.Delete(ctx, p.self.ID); derr != nil && !errors.Is(derr, jetstream.ErrKeyNotFound) {
				err = fmt.Errorf("cluster: delete entry %s: %w", p.self.ID, derr)
			}
			cancel()
		}
		p.cancel()
		p.loops.Wait()
	})
	return err
}

// Expelled is closed when this member's entry expired while it was
// running: the others have removed it and protoactor-go has blocked its ID
// for good. The member's actors must stop and the node must join again as
// a new member.
func (p *Provider) Expelled() <-chan struct{} { return p.expelled }

// Fresh reports whether this member's entry is known to have been
// refreshed within the TTL. A member that is not current (it was paused,
// or cut off from NATS) may already have been removed by the others, so
// its view of who owns what is not to be acted on: it should neither
// route nor acknowledge work until it is current again or expelled.
func (p *Provider) Fresh() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.beat.IsZero() && time.Since(p.beat) < p.cfg.TTL
}

// Level is the newest schema version every member reads: the least
// Reads among the last complete member list the bucket gave and this
// member's own. It starts at 1: a member that cannot yet know who else is
// there writes what every build reads. It falls as soon as a member that
// reads less is in the list, and rises only once every member has read
// more for RaiseAfter: a member of an older build that was briefly out
// (its entry expired) and comes back finds nothing it cannot read. What
// was written before a fall stays; see docs/operations.md, Upgrades.
func (p *Provider) Level() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	least := 1
	if p.synced {
		least = max(p.self.Reads, 1)
		for _, e := range p.members {
			least = min(least, max(e.Reads, 1))
		}
	}
	if p.level.at == 0 {
		p.level.at = 1
	}
	if p.synced && !p.inherited {
		// A member that starts (a restart in a rolling deploy, say) beside
		// members that have all reached a level starts at it: they have
		// seen every member read it for RaiseAfter, and this member reads
		// it too (least), so waiting again would only have it write
		// less for RaiseAfter (an older level: runs admitted meanwhile
		// would not be pinned to their definition, for one). A member
		// that announces none, or is alone, leaves it at 1.
		p.inherited = true
		inherit := 0
		for id, e := range p.members {
			if id == p.self.ID {
				continue
			}
			if e.Level < 2 {
				inherit = 0
				break
			}
			if inherit == 0 || e.Level < inherit {
				inherit = e.Level
			}
		}
		if start := min(inherit, least); start > p.level.at {
			p.level.at = start
		}
	}
	was := p.level.at
	at := p.level.step(least, p.cfg.Now(), p.cfg.RaiseAfter)
	if at != was || !p.levelLogged {
		p.levelLogged = true
		p.log.Info("cluster: schema level", "schema_level", at, "members_read", least, "id", p.self.ID)
	}
	return at
}

// ActiveFromLog reports whether every member derives the active set from
// the log, so none needs the bucket cairn_active written: false until the
// complete member list says so and has said it for RaiseAfter (as Level
// rises), and false again as soon as a member that does not is in it.
func (p *Provider) ActiveFromLog() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	least := 0
	if p.synced && p.self.LogActive {
		least = 1
		for _, e := range p.members {
			if !e.LogActive {
				least = 0
			}
		}
	}
	return p.logActive.step(least, p.cfg.Now(), p.cfg.RaiseAfter) == 1
}

// ratchet is a level that falls at once and rises only once what it would
// rise to has held for a while.
type ratchet struct {
	at     int
	rising time.Time // since when a higher level has held (zero: none)
}

// step takes the level every member now allows and returns the level.
func (r *ratchet) step(least int, now time.Time, after time.Duration) int {
	switch {
	case least <= r.at:
		r.at, r.rising = least, time.Time{}
	case r.rising.IsZero():
		r.rising = now
	case now.Sub(r.rising) >= after:
		r.at, r.rising = least, time.Time{}
	}
	return r.at
}

// Members returns the last complete member list the bucket gave, sorted by
// ID (nil before the first complete read).
func (p *Provider) Members() []*pcluster.Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.synced {
		return nil
	}
	return p.listLocked()
}

func (p *Provider) listLocked() []*pcluster.Member {
	out := make([]*pcluster.Member, 0, len(p.members)+1)
	for _, e := range p.members {
		out = append(out, e.member())
	}
	if _, ok := p.members[p.self.ID]; !ok {
		// Our own entry may not have reached the watch yet; we are alive.
		out = append(out, p.self.member())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

func (p *Provider) expel(why string) {
	p.mu.Lock()
	stopping := p.stopping
	p.mu.Unlock()
	if stopping {
		return
	}
	p.expelOnce.Do(func() {
		p.log.Warn("cluster: this member's entry expired; it must rejoin as a new member", "id", p.self.ID, "why", why)
		close(p.expelled)
		p.cancel()
	})
}

// heartbeat refreshes the entry with a compare-and-set on its revision.
func (p *Provider) heartbeat(ctx context.Context) {
	defer p.loops.Done()
	t := time.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The level steps when asked: ask at every beat, so that it rises
		// (and is announced, and logged) though the node writes nothing.
		p.Level()
		p.refresh(ctx)
	}
}

func (p *Provider) refresh(ctx context.Context) {
	p.mu.Lock()
	rev := p.rev
	announce := p.level.at
	if announce <= 1 {
		announce = 0 // none: a member that starts beside it starts at 1
	}
	if announce != p.self.Level {
		// Announce the level reached (or fallen to), for the members
		// that start next.
		p.self.Level = announce
		if b, err := json.Marshal(p.self); err == nil {
			p.value = b
		}
	}
	value := p.value
	p.mu.Unlock()
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, p.cfg.Heartbeat)
	defer cancel()
	next, err := p.cfg.KV.Update(cctx, p.self.ID, value, rev)
	if err == nil {
		p.mu.Lock()
		p.rev, p.beat = next, sent
		p.mu.Unlock()
		return
	}
	if ctx.Err() != nil {
		return
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
		// Transient (timeout, leader change): the next beat tries again;
		// only the bucket's TTL decides that we are gone.
		p.log.Debug("cluster: heartbeat failed; retrying", "id", p.self.ID, "err", err)
		return
	}
	// Only this member writes its key, so a newer revision is either our
	// own refresh whose acknowledgement was lost, or the server's expiry
	// marker.
	e, gerr := p.cfg.KV.Get(cctx, p.self.ID)
	switch {
	case gerr == nil:
		p.mu.Lock()
		p.rev, p.beat = e.Revision(), e.Created()
		p.mu.Unlock()
	case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
		p.expel("heartbeat: entry gone")
	default:
		p.log.Debug("cluster: heartbeat check failed; retrying", "id", p.self.ID, "err", gerr)
	}
}

// watch follows the bucket. A failed or broken watch keeps the last
// complete list and starts over; a new snapshot replaces the list only
// once it is complete.
func (p *Provider) watch(ctx context.Context) {
	defer p.loops.Done()
	for ctx.Err() == nil {
		if err := p.watchOnce(ctx); err != nil && ctx.Err() == nil {
			p.log.Debug("cluster: watch failed; keeping the last member list", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.cfg.Heartbeat / 2):
		}
	}
}

func (p *Provider) watchOnce(ctx context.Context) error {
	w, err := p.cfg.KV.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("cluster: watch: %w", err)
	}
	defer func() { _ = w.Stop() }()
	snapshot := map[string]entry{}
	initial := true
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case e, ok = <-w.Updates():
		}
		if !ok {
			return errors.New("cluster: watch ended")
		}
		if e == nil { // the initial values are complete, or so the client says
			initial = false
			if _, ok := snapshot[p.self.ID]; !ok && p.gone(ctx, p.self.ID) {
				// Created before the watch started: absent means expired.
				p.expel("watch: entry absent")
				return nil
			}
			p.mu.Lock()
			prev := maps.Clone(p.members)
			p.mu.Unlock()
			p.confirm(ctx, prev, snapshot)
			p.mu.Lock()
			p.members, p.synced = merged(prev, p.members, snapshot), true
			p.mu.Unlock()
			p.push(false)
			continue
		}
		if initial {
			p.apply(snapshot, e)
			continue
		}
		p.mu.Lock()
		p.apply(p.members, e)
		p.mu.Unlock()
		if e.Key() == p.self.ID && e.Operation() != jetstream.KeyValuePut {
			p.expel("watch: entry " + e.Operation().String())
			return nil
		}
		p.push(false)
	}
}

// apply folds one bucket entry into a member list. An entry older than
// twice the TTL is expired even without its marker: the server did not
// expire it in time (a bucket replica that became leader after its old
// leader died may expire the entry without writing the marker, or late).
func (p *Provider) apply(m map[string]entry, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut || (e.Key() != p.self.ID && time.Since(e.Created()) > 2*p.cfg.TTL) {
		delete(m, e.Key())
		return
	}
	var v entry
	if err := json.Unmarshal(e.Value(), &v); err != nil || v.ID != e.Key() || v.Host == "" {
		p.log.Warn("cluster: ignoring a malformed member entry", "key", e.Key(), "err", err)
		return
	}
	v.seen, v.rev = e.Created(), e.Revision()
	m[e.Key()] = v
}

// confirm puts back into a complete read (next) the members of the list
// it replaces (prev) that it lacks but that are still there. The nats.go
// watcher says its initial values are complete once it has received as
// many messages as the stream held when it started, or one reports no more
// pending; under concurrent heartbeats either can come early (a member's
// own refresh counted in place of another's entry), so a read can lack a
// live member. Dropping it would make protoactor-go block that member for
// good while it is healthy (seen under load: TestTransientErrorsRemoveNoOne).
// So an absent member is dropped only if its last revision is older than
// the TTL and a read of its key finds it gone; a failed read keeps it.
// The price: a member that left gracefully while this member's watch was
// restarting (its delete not replayed by the new watch) stays listed until
// its last revision is a TTL old, as if it had crashed.
func (p *Provider) confirm(ctx context.Context, prev, next map[string]entry) {
	for id, old := range prev {
		if _, ok := next[id]; ok || id == p.self.ID {
			continue
		}
		if time.Since(old.seen) < p.cfg.TTL || !p.gone(ctx, id) {
			next[id] = old
			continue
		}
		p.log.Info("cluster: a member's entry is gone", "self", p.self.ID, "member", id)
	}
}

// merged is a complete read (next) as it may replace the member list,
// given the list it was read against (prev) and the list as it is now
// (cur): the reads of confirm leave the list unlocked, and the watch may
// have changed it meanwhile. What changed since prev wins: a member added
// or refreshed to a newer revision stays in, one removed stays out (a
// member dropped and then listed again is blocked by protoactor-go for
// good, the harm this guards against).
func merged(prev, cur, next map[string]entry) map[string]entry {
	for id, e := range cur {
		if old, had := prev[id]; had && e.rev <= old.rev {
			continue
		}
		if n, ok := next[id]; !ok || e.rev >= n.rev {
			next[id] = e
		}
	}
	for id := range prev {
		if _, still := cur[id]; !still {
			delete(next, id)
		}
	}
	return next
}

// gone reports whether a read of a member's key finds it deleted or
// expired, or holding a revision older than twice the TTL (not this
// member's: the server did not expire it in time, as apply). A failed
// read is not an answer: gone reports false.
func (p *Provider) gone(ctx context.Context, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.TTL)
	defer cancel()
	e, err := p.cfg.KV.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		return true
	case err != nil:
		p.log.Debug("cluster: reading a member's entry failed; keeping it", "self", p.self.ID, "member", id, "err", err)
		return false
	}
	return e.Operation() != jetstream.KeyValuePut || (id != p.self.ID && time.Since(e.Created()) > 2*p.cfg.TTL)
}

// snapshot reads the whole bucket once. Expiry markers are how watchers
// learn of an expiry, but one can be missing (see apply): a complete read
// that no longer holds an entry, or holds it stale, is the bucket's word
// too. A failed read changes nothing.
func (p *Provider) snapshot(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.TTL)
	defer cancel()
	w, err := p.cfg.KV.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("cluster: snapshot: %w", err)
	}
	defer func() { _ = w.Stop() }()
	m := map[string]entry{}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: snapshot: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("cluster: snapshot: watch ended")
			}
			if e != nil {
				p.apply(m, e)
				continue
			}
			p.mu.Lock()
			synced, prev := p.synced, maps.Clone(p.members)
			p.mu.Unlock()
			if !synced {
				return nil
			}
			if own, ok := prev[p.self.ID]; ok {
				m[p.self.ID] = own // only the heartbeat decides about this member
			}
			p.confirm(ctx, prev, m)
			p.mu.Lock()
			p.members = merged(prev, p.members, m)
			p.mu.Unlock()
			return nil
		}
	}
}

func (p *Provider) resync(ctx context.Context) {
	defer p.loops.Done()
	t := time.NewTicker(p.cfg.Resync)
	defer t.Stop()
	snap := time.NewTicker(p.cfg.TTL)
	defer snap.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.push(true)
		case <-snap.C:
			if err := p.snapshot(ctx); err != nil {
				p.log.Debug("cluster: snapshot failed; keeping the member list", "err", err)
				continue
			}
			p.push(false)
		}
	}
}

// push gives protoactor-go the complete list; unchanged lists are pushed
// again only when force is set (the periodic resync).
func (p *Provider) push(force bool) {
	p.pushMu.Lock()
	defer p.pushMu.Unlock()
	select {
	case <-p.expelled:
		return
	default:
	}
	p.mu.Lock()
	if !p.synced || p.stopping {
		p.mu.Unlock()
		return
	}
	list := p.listLocked()
	sig := signature(list)
	changed := sig != p.pushed
	p.pushed = sig
	p.mu.Unlock()
	if !changed && !force {
		return
	}
	if changed {
		p.log.Info("cluster: members", "self", p.self.ID, "members", sig)
	}
	p.topo.UpdateClusterTopology(list)
}

func signature(list []*pcluster.Member) string {
	parts := make([]string, len(list))
	for i, m := range list {
		parts[i] = m.Id + "@" + m.Address()
	}
	return strings.Join(parts, ",")
}
