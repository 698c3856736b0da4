package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cairn-agents/cairn/cluster"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

const ttl = 2 * time.Second

// faultyKV is the real bucket with switchable faults.
type faultyKV struct {
	cluster.KV
	mu          sync.Mutex
	failUpdate  bool // every Update fails (a member that cannot reach NATS)
	loseAck     bool // the next Update is stored but answers an error
	failWatch   bool // WatchAll fails and running watches are cut
	failGet     bool
	dropMarkers bool   // watches never deliver a delete or an expiry marker after their initial values
	hide        string // watches leave this key out of their initial values, as the nats.go watcher can under concurrent writes
	stale       string // a Get of this key answers its last value, refreshed long ago, as a server that never expired it
	staleValue  []byte
	watchCancel []context.CancelFunc
}

var errInjected = errors.New("injected: nats: timeout")

func (f *faultyKV) set(fn func(f *faultyKV)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
	if f.failWatch {
		for _, c := range f.watchCancel {
			c()
		}
		f.watchCancel = nil
	}
}

func (f *faultyKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	f.mu.Lock()
	fail, lose := f.failUpdate, f.loseAck
	f.loseAck = false
	f.mu.Unlock()
	if fail {
		return 0, errInjected
	}
	r, err := f.KV.Update(ctx, key, value, rev)
	if lose && err == nil {
		return 0, errInjected
	}
	return r, err
}

func (f *faultyKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	f.mu.Lock()
	fail, stale, value := f.failGet, f.stale, f.staleValue
	f.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	if key == stale {
		return staleEntry{key: key, value: value}, nil
	}
	return f.KV.Get(ctx, key)
}

// staleEntry is a member's entry last refreshed three TTLs ago.
type staleEntry struct {
	jetstream.KeyValueEntry
	key   string
	value []byte
}

func (e staleEntry) Key() string                     { return e.key }
func (e staleEntry) Value() []byte                   { return e.value }
func (e staleEntry) Revision() uint64                { return 1 }
func (e staleEntry) Created() time.Time              { return time.Now().Add(-3 * ttl) }
func (e staleEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func (f *faultyKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWatch {
		return nil, errInjected
	}
	ctx, cancel := context.WithCancel(ctx)
	f.watchCancel = append(f.watchCancel, cancel)
	w, err := f.KV.WatchAll(ctx, opts...)
	if err != nil || (!f.dropMarkers && f.hide == "") {
		return w, err
	}
	markers, hide := f.dropMarkers, f.hide
	return newFiltered(w, func(live bool, e jetstream.KeyValueEntry) bool {
		if live {
			// Without the markers of its live updates, as when the
			// server expired an entry without writing its marker.
			return markers && e.Operation() != jetstream.KeyValuePut
		}
		return e.Key() == hide
	}), nil
}

// filtered passes a watch on without the entries drop names; live is
// false for the initial values.
type filtered struct {
	jetstream.KeyWatcher
	out  chan jetstream.KeyValueEntry
	stop chan struct{}
	once sync.Once
}

func newFiltered(w jetstream.KeyWatcher, drop func(live bool, e jetstream.KeyValueEntry) bool) *filtered {
	m := &filtered{KeyWatcher: w, out: make(chan jetstream.KeyValueEntry), stop: make(chan struct{})}
	go func() {
		defer close(m.out)
		live := false
		for e := range w.Updates() {
			if e == nil {
				live = true
			} else if drop(live, e) {
				continue
			}
			select {
			case m.out <- e:
			case <-m.stop: // the provider stopped reading
				return
			}
		}
	}()
	return m
}

func (m *filtered) Stop() error {
	m.once.Do(func() { close(m.stop) })
	return m.KeyWatcher.Stop()
}

func (m *filtered) Updates() <-chan jetstream.KeyValueEntry { return m.out }

type member struct {
	id   string
	p    *cluster.Provider
	c    *pcluster.Cluster // nil for a member joined alone
	kv   *faultyKV
	mu   sync.Mutex
	left []string // IDs protoactor-go (or the recorder) was told left
	last map[string]bool
	gone map[string]bool // left: blocked for good, as protoactor-go does
}

// starter starts a member on a bucket: with protoactor-go (startMember),
// or alone (joinAlone).
type starter func(t *testing.T, kv jetstream.KeyValue, name string) *member

// joinAlone joins a provider with no actor system: its member lists go to
// the member itself (a Topology that records who left, as protoactor-go's
// MemberList tells its event stream). The tests named ...Alone run the
// provider this way under the race detector, which protoactor-go's
// cluster does not pass (.ci/run).
func joinAlone(t *testing.T, kv jetstream.KeyValue, name string) *member {
	t.Helper()
	return joinAloneReading(t, kv, name, 0)
}

// joinAloneReading is joinAlone of a member that announces it reads the
// log's schema up to reads (0: a build that does not announce it).
func joinAloneReading(t *testing.T, kv jetstream.KeyValue, name string, reads int) *member {
	t.Helper()
	return joinAloneWith(t, kv, name, cluster.Config{Reads: reads})
}

// joinAloneWith is joinAlone with Reads, RaiseAfter and Now from cfg.
func joinAloneWith(t *testing.T, kv jetstream.KeyValue, name string, cfg cluster.Config) *member {
	t.Helper()
	m := &member{id: "alone-" + name, kv: &faultyKV{KV: kv}}
	p, err := cluster.NewProvider(cluster.Config{KV: m.kv, TTL: ttl, Heartbeat: 200 * time.Millisecond, Name: name, Logger: testLogger(t),
		Reads: cfg.Reads, RaiseAfter: cfg.RaiseAfter, Now: cfg.Now, KVActive: cfg.KVActive})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Join(cluster.Self{ID: m.id, Host: "127.0.0.1", Port: 1, Kinds: []string{"echo"}}, m); err != nil {
		t.Fatal(err)
	}
	m.p = p
	t.Cleanup(func() { _ = p.Shutdown(true) })
	return m
}

// UpdateClusterTopology records the members that left since the last
// list. As protoactor-go's MemberList, it blocks a member that left for
// good: one that shows up again (a stale read) is not taken back.
func (m *member) UpdateClusterTopology(list pcluster.Members) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone == nil {
		m.gone = map[string]bool{}
	}
	now := map[string]bool{}
	for _, x := range list {
		if !m.gone[x.Id] {
			now[x.Id] = true
		}
	}
	for id := range m.last {
		if !now[id] {
			m.left = append(m.left, id)
			m.gone[id] = true
		}
	}
	m.last = now
}

func (m *member) leftIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.left...)
}

// echo answers with the address of the member it lives on.
type echo struct{}

func (echo) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*wrapperspb.StringValue); ok {
		ctx.Respond(wrapperspb.String(ctx.ActorSystem().Address()))
	}
}

func startMember(t *testing.T, kv jetstream.KeyValue, name string) *member {
	t.Helper()
	m := &member{kv: &faultyKV{KV: kv}}
	p, err := cluster.NewProvider(cluster.Config{KV: m.kv, TTL: ttl, Heartbeat: 200 * time.Millisecond, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	system.EventStream.Subscribe(func(ev any) {
		if topo, ok := ev.(*pcluster.ClusterTopology); ok {
			m.mu.Lock()
			for _, l := range topo.Left {
				m.left = append(m.left, l.Id)
			}
			m.mu.Unlock()
		}
	})
	rcfg := remote.Configure("127.0.0.1", 0)
	rcfg.MaxRetryCount = 1
	kind := pcluster.NewKind("echo", actor.PropsFromProducer(func() actor.Actor { return echo{} }))
	c := pcluster.New(system, pcluster.Configure("test", p, disthash.New(), rcfg, pcluster.WithKinds(kind)))
	c.StartMember()
	m.id, m.p, m.c = system.ID, p, c
	t.Cleanup(func() {
		_ = p.Shutdown(true)
		c.Shutdown(false)
	})
	return m
}

// testLogger writes the provider's debug lines to the test's output,
// printed when the test fails.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	nc := natstest.Connect(t, natstest.Server(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := cluster.Bucket(context.Background(), js, cluster.BucketConfig{Name: "members", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// eventually waits (bounded, generously) for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached within 20s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ids(list []*pcluster.Member) map[string]bool {
	out := map[string]bool{}
	for _, m := range list {
		out[m.Id] = true
	}
	return out
}

func sees(m *member, want ...*member) bool {
	got := ids(m.p.Members())
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !got[w.id] {
			return false
		}
	}
	return true
}

func TestMembershipConvergesAndPlacesAcrossMembers(t *testing.T) {
	kv := bucket(t)
	a, b, c := startMember(t, kv, "a"), startMember(t, kv, "b"), startMember(t, kv, "c")
	all := []*member{a, b, c}
	for _, m := range all {
		eventually(t, m.id+" sees all three", func() bool { return sees(m, all...) })
	}
	// Virtual actors are placed by identity on every member, whichever
	// member asks.
	placed := map[string]bool{}
	eventually(t, "identities placed on all three members", func() bool {
		for i := range 60 {
			res, err := all[i%3].c.Request(fmt.Sprintf("id-%d", i), "echo", &wrapperspb.StringValue{}, pcluster.WithTimeout(2*time.Second))
			if err != nil {
				continue
			}
			if s, ok := res.(*wrapperspb.StringValue); ok {
				placed[s.Value] = true
			}
		}
		return len(placed) == 3
	})
}

func TestExpiryRemovesAMemberAndExpelsIt(t *testing.T)      { expiryRemovesAMember(t, startMember) }
func TestExpiryRemovesAMemberAndExpelsItAlone(t *testing.T) { expiryRemovesAMember(t, joinAlone) }

func expiryRemovesAMember(t *testing.T, start starter) {
	kv := bucket(t)
	a, b, c := start(t, kv, "a"), start(t, kv, "b"), start(t, kv, "c")
	for _, m := range []*member{a, b, c} {
		eventually(t, "all three", func() bool { return sees(m, a, b, c) })
	}
	// c stops refreshing (a pause, a partition): its entry expires.
	c.kv.set(func(f *faultyKV) { f.failUpdate = true })
	for _, m := range []*member{a, b} {
		eventually(t, "c removed", func() bool { return sees(m, a, b) })
	}
	if c.p.Fresh() || !a.p.Fresh() {
		t.Errorf("Current: c %v (its heartbeats failed for longer than the TTL), a %v", c.p.Fresh(), a.p.Fresh())
	}
	for _, m := range []*member{a, b} {
		if got := m.leftIDs(); len(got) != 1 || got[0] != c.id {
			t.Errorf("%s: protoactor-go was told %v left, want only %s", m.id, got, c.id)
		}
	}
	// c reaches NATS again: it finds its entry gone and is expelled.
	c.kv.set(func(f *faultyKV) { f.failUpdate = false })
	select {
	case <-c.p.Expelled():
	case <-time.After(20 * time.Second):
		t.Fatal("c was not expelled after its entry expired")
	}
	select {
	case <-a.p.Expelled():
		t.Fatal("a was expelled")
	default:
	}
}

// An expiry whose marker never reaches the watch (seen when the bucket's
// leader died) is still found by the periodic complete read.
func TestExpiryWithoutMarkerRemovesAMember(t *testing.T) { expiryWithoutMarker(t, startMember, false) }
func TestExpiryWithoutMarkerRemovesAMemberAlone(t *testing.T) {
	expiryWithoutMarker(t, joinAlone, false)
}

// Nor does a read of the key that answers a revision older than twice the
// TTL keep a member: the server did not expire it in time.
func TestStaleEntryRemovesAMember(t *testing.T)      { expiryWithoutMarker(t, startMember, true) }
func TestStaleEntryRemovesAMemberAlone(t *testing.T) { expiryWithoutMarker(t, joinAlone, true) }

func expiryWithoutMarker(t *testing.T, start starter, staleRead bool) {
	kv := bucket(t)
	a, b, c := start(t, kv, "a"), start(t, kv, "b"), start(t, kv, "c")
	for _, m := range []*member{a, b, c} {
		eventually(t, "all three", func() bool { return sees(m, a, b, c) })
	}
	for _, m := range []*member{a, b} {
		m.kv.set(func(f *faultyKV) { f.dropMarkers = true; f.failWatch = true })
		m.kv.set(func(f *faultyKV) { f.failWatch = false }) // the watch restarts, markerless
	}
	if staleRead {
		e, err := kv.Get(context.Background(), c.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []*member{a, b} {
			m.kv.set(func(f *faultyKV) { f.stale, f.staleValue = c.id, e.Value() })
		}
	}
	c.kv.set(func(f *faultyKV) { f.failUpdate = true })
	for _, m := range []*member{a, b} {
		eventually(t, "c removed", func() bool { return sees(m, a, b) })
	}
}

// A complete read that lacks a live member (the nats.go watcher can end
// its initial values early while members refresh their entries) removes
// no one: not another member, and not the member itself.
func TestIncompleteReadRemovesNoOne(t *testing.T)      { incompleteRead(t, startMember) }
func TestIncompleteReadRemovesNoOneAlone(t *testing.T) { incompleteRead(t, joinAlone) }

func incompleteRead(t *testing.T, start starter) {
	for _, who := range []string{"another member", "itself"} {
		t.Run(who, func(t *testing.T) {
			kv := bucket(t)
			a, b := start(t, kv, "a"), start(t, kv, "b")
			for _, m := range []*member{a, b} {
				eventually(t, "both", func() bool { return sees(m, a, b) })
			}
			hidden := b.id
			if who == "itself" {
				hidden = a.id
			}
			// Every read a makes from now on lacks the hidden entry: the
			// watch restarts (its initial values) and the periodic
			// complete reads come every TTL.
			a.kv.set(func(f *faultyKV) { f.hide = hidden; f.failWatch = true })
			a.kv.set(func(f *faultyKV) { f.failWatch = false })
			for range 2 * int(ttl/(200*time.Millisecond)) {
				time.Sleep(200 * time.Millisecond)
				if !sees(a, a, b) {
					t.Fatalf("a sees %v", ids(a.p.Members()))
				}
			}
			if got := a.leftIDs(); len(got) != 0 {
				t.Errorf("protoactor-go was told %v left", got)
			}
			select {
			case <-a.p.Expelled():
				t.Error("a expelled")
			default:
			}
		})
	}
}

func TestGracefulShutdownRemovesAtOnce(t *testing.T)      { gracefulShutdown(t, startMember) }
func TestGracefulShutdownRemovesAtOnceAlone(t *testing.T) { gracefulShutdown(t, joinAlone) }

func gracefulShutdown(t *testing.T, start starter) {
	kv := bucket(t)
	a, b := start(t, kv, "a"), start(t, kv, "b")
	eventually(t, "a sees both", func() bool { return sees(a, a, b) })
	if err := b.p.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(context.Background(), b.id); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("b's entry after Shutdown: %v, want ErrKeyNotFound", err)
	}
	eventually(t, "b removed", func() bool { return sees(a, a) })
	select {
	case <-b.p.Expelled():
		t.Fatal("a graceful shutdown expelled b")
	default:
	}
}

func TestTransientErrorsRemoveNoOne(t *testing.T)      { transientErrors(t, startMember) }
func TestTransientErrorsRemoveNoOneAlone(t *testing.T) { transientErrors(t, joinAlone) }

func transientErrors(t *testing.T, start starter) {
	tests := []struct {
		name  string
		fault func(f *faultyKV)
	}{
		{"heartbeats fail for less than the TTL", func(f *faultyKV) { f.failUpdate = true }},
		{"the watch breaks and cannot restart", func(f *faultyKV) { f.failWatch = true }},
		{"a heartbeat's acknowledgement is lost", func(f *faultyKV) { f.loseAck = true }},
		{"a lost acknowledgement and a failed check", func(f *faultyKV) { f.loseAck, f.failGet = true, true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv := bucket(t)
			a, b := start(t, kv, "a"), start(t, kv, "b")
			for _, m := range []*member{a, b} {
				eventually(t, "both", func() bool { return sees(m, a, b) })
			}
			b.kv.set(tt.fault)
			// A fault well shorter than the TTL (several heartbeats): at
			// half the TTL, a machine loaded by other tests starved the
			// first heartbeat after it past the TTL (fresh-clone-check
			// beside the chaos long run, session 12).
			time.Sleep(ttl / 4)
			b.kv.set(func(f *faultyKV) { f.failUpdate, f.loseAck, f.failWatch, f.failGet = false, false, false, false })
			// Well past the TTL: an entry that was not refreshed would
			// have expired by now.
			for range 2 * int(ttl/(200*time.Millisecond)) {
				time.Sleep(200 * time.Millisecond)
				if !sees(a, a, b) || !sees(b, a, b) {
					t.Fatalf("membership changed: a sees %v, b sees %v", ids(a.p.Members()), ids(b.p.Members()))
				}
			}
			for _, m := range []*member{a, b} {
				if got := m.leftIDs(); len(got) != 0 {
					t.Errorf("protoactor-go was told %v left", got)
				}
				select {
				case <-m.p.Expelled():
					t.Errorf("%s expelled", m.id)
				default:
				}
			}
		})
	}
}

func TestConfigErrorsNameTheFieldAlone(t *testing.T) {
	kv := &faultyKV{}
	tests := []struct {
		name string
		cfg  cluster.Config
		want string
	}{
		{"no bucket", cluster.Config{TTL: time.Second}, "Config.KV"},
		{"no TTL", cluster.Config{KV: kv}, "Config.TTL"},
		{"heartbeat not below TTL", cluster.Config{KV: kv, TTL: time.Second, Heartbeat: time.Second}, "Config.Heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cluster.NewProvider(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// Level is the newest schema version every member reads: a member that
// announces less (or nothing, as a build before the announcement) lowers
// it for all at once; it rises again only once every member has read more
// for RaiseAfter, so a member of an older build that was out for less
// (paused past the TTL) comes back to nothing it cannot read. Members
// write at the level: a build never meets a version it cannot read while
// it is a member (a rolling upgrade). The clock of RaiseAfter is the
// test's.
func TestLevelIsWhatEveryMemberReadsAlone(t *testing.T) {
	kv := bucket(t)
	clock, advance := movingClock()
	const raise = time.Minute
	a := joinAloneWith(t, kv, "a", cluster.Config{Reads: 2, RaiseAfter: raise, Now: clock})
	eventually(t, "a sees itself", func() bool { return sees(a, a) })
	level := func(m *member, want int, when string) {
		t.Helper()
		if got := m.p.Level(); got != want {
			t.Fatalf("%s: %s's level %d, want %d", when, m.id, got, want)
		}
	}
	level(a, 1, "a alone, reading 2, at first")
	advance(raise)
	level(a, 2, "a alone, reading 2, a RaiseAfter on")
	old := joinAloneReading(t, kv, "old", 0)
	eventually(t, "a and old see each other", func() bool { return sees(a, a, old) && sees(old, a, old) })
	level(a, 1, "a beside a member that does not announce")
	level(old, 1, "old beside a")
	// old is out (its entry gone) for less than RaiseAfter, and back.
	if err := old.p.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a alone again", func() bool { return sees(a, a) })
	level(a, 1, "a just after old left")
	advance(raise / 2)
	level(a, 1, "a half a RaiseAfter after old left")
	back := joinAloneReading(t, kv, "old-back", 0)
	eventually(t, "a and old-back see each other", func() bool { return sees(a, a, back) })
	advance(raise)
	level(a, 1, "a beside old-back")
	if err := back.p.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a alone once more", func() bool { return sees(a, a) })
	level(a, 1, "a just after old-back left")
	advance(raise)
	level(a, 2, "a a RaiseAfter after old-back left")
	b := joinAloneWith(t, kv, "b", cluster.Config{Reads: 3, RaiseAfter: raise, Now: clock})
	eventually(t, "a and b see each other", func() bool { return sees(a, a, b) && sees(b, a, b) })
	advance(raise)
	level(a, 2, "a reading 2 beside b reading 3")
	b.p.Level() // b starts rising: every member reads 2
	advance(raise)
	level(b, 2, "b reading 3 beside a reading 2")
}

// The active set is derived from the log alone (no member writes the
// bucket cairn_active) only once every member says it does so, and has
// for RaiseAfter; a member that does not (an earlier build's entry has no
// log_active; one pinned to an earlier level announces false) turns it
// off at once.
func TestActiveFromLogOnceEveryMemberSaysSo(t *testing.T) {
	kv := bucket(t)
	clock, advance := movingClock()
	const raise = time.Minute
	a := joinAloneWith(t, kv, "a", cluster.Config{Reads: 2, RaiseAfter: raise, Now: clock})
	eventually(t, "a sees itself", func() bool { return sees(a, a) })
	fromLog := func(m *member, want bool, when string) {
		t.Helper()
		if got := m.p.ActiveFromLog(); got != want {
			t.Fatalf("%s: %s derives the active set from the log: %v, want %v", when, m.id, got, want)
		}
	}
	fromLog(a, false, "a alone, at first")
	advance(raise)
	fromLog(a, true, "a alone, a RaiseAfter on")
	old := joinAloneWith(t, kv, "old", cluster.Config{KVActive: true})
	eventually(t, "a and old see each other", func() bool { return sees(a, a, old) && sees(old, a, old) })
	fromLog(a, false, "a beside a member that writes the bucket")
	fromLog(old, false, "old itself")
	if err := old.p.Shutdown(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a alone again", func() bool { return sees(a, a) })
	fromLog(a, false, "a just after old left")
	advance(raise)
	fromLog(a, true, "a a RaiseAfter after old left")
}

// movingClock is a Config.Now the test moves on.
func movingClock() (now func() time.Time, advance func(time.Duration)) {
	var mu sync.Mutex
	at := time.Unix(1e9, 0)
	return func() time.Time { mu.Lock(); defer mu.Unlock(); return at },
		func(d time.Duration) { mu.Lock(); at = at.Add(d); mu.Unlock() }
}

func TestLevelBeforeTheFirstReadIsOne(t *testing.T) {
	p, err := cluster.NewProvider(cluster.Config{KV: &faultyKV{}, TTL: ttl, Reads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Level(); got != 1 {
		t.Fatalf("level before any read: %d, want 1", got)
	}
	if _, err := cluster.NewProvider(cluster.Config{KV: &faultyKV{}, TTL: ttl, Reads: -1}); err == nil {
		t.Fatal("Reads -1 accepted")
	}
}

// A member that starts beside members that have all reached a level
// starts at it (a restart in a rolling deploy writes the cluster's level at
// once, not level 1 for RaiseAfter: runs it admits are pinned to their
// definition from its first); beside one that announces none, or one that
// reads less, it starts lower, as before.
func TestAStartingMemberTakesTheLevelItsPeersReached(t *testing.T) {
	kv := bucket(t)
	clock, advance := movingClock()
	const raise = time.Minute
	a := joinAloneWith(t, kv, "a", cluster.Config{Reads: 3, RaiseAfter: raise, Now: clock})
	eventually(t, "a sees itself", func() bool { return sees(a, a) })
	a.p.Level()
	advance(raise)
	if got := a.p.Level(); got != 3 {
		t.Fatalf("a alone a RaiseAfter on: level %d, want 3", got)
	}
	announces := func(m *member, level int) func() bool {
		return func() bool {
			e, err := kv.Get(context.Background(), m.id)
			if err != nil {
				return false
			}
			var v struct {
				Level int `json:"level"`
			}
			return json.Unmarshal(e.Value(), &v) == nil && v.Level == level
		}
	}
	eventually(t, "a announces level 3", announces(a, 3))
	b := joinAloneWith(t, kv, "b", cluster.Config{Reads: 3, RaiseAfter: raise, Now: clock})
	eventually(t, "b sees a", func() bool { return sees(b, a, b) })
	if got := b.p.Level(); got != 3 {
		t.Fatalf("b started beside a at level 3: level %d, want 3 at once", got)
	}
	eventually(t, "b announces level 3", announces(b, 3))
	// A member of a build that reads less, starting beside them, takes
	// what it reads, and the others fall to it.
	c := joinAloneWith(t, kv, "c", cluster.Config{Reads: 2, RaiseAfter: raise, Now: clock})
	eventually(t, "c sees a and b", func() bool { return sees(c, a, b, c) })
	if got := c.p.Level(); got != 2 {
		t.Fatalf("c reading 2 beside a and b: level %d, want 2", got)
	}
	eventually(t, "a sees c", func() bool { return sees(a, a, b, c) })
	if got := a.p.Level(); got != 2 {
		t.Fatalf("a beside c: level %d, want 2", got)
	}
	// Beside one that announces nothing (an earlier build), a new
	// member starts at 1.
	old := joinAloneReading(t, kv, "old", 0)
	d := joinAloneWith(t, kv, "d", cluster.Config{Reads: 3, RaiseAfter: raise, Now: clock})
	eventually(t, "d sees everyone", func() bool { return sees(d, a, b, c, old, d) })
	if got := d.p.Level(); got != 1 {
		t.Fatalf("d beside a member that announces nothing: level %d, want 1", got)
	}
}
