package projections

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// Config configures a Runner.
type Config struct {
	// JS is the JetStream context; required.
	JS jetstream.JetStream
	// Stream is the log's stream; "" means events.DefaultStream.
	Stream string
	// StateBucket is the object-store bucket that keeps each projection's
	// state with its position, so a restart resumes where it stopped. ""
	// keeps the state in memory only: the projection is rebuilt from
	// sequence 1 by an ordered consumer at every start (nothing is left on
	// the server).
	StateBucket string
	// SaveEvery is how often a changed state is saved (and on Close); zero
	// means 5s. Saving rewrites the whole snapshot, so a short interval
	// costs the state's size per interval.
	SaveEvery time.Duration
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Keys open events the node sealed (its payload codec); nil reads
	// plain events only.
	Keys *events.Keyring
}

// Runner keeps one projection current with the log.
type Runner struct {
	cfg    Config
	js     jetstream.JetStream
	stream jetstream.Stream
	store  jetstream.ObjectStore
	log    *slog.Logger

	mu      sync.Mutex
	f       *Follower
	dirty   bool
	err     error
	changed chan struct{} // closed and replaced when the position moves

	// serverSide says the consumer filters on the server; otherwise it
	// reads the whole stream and handle filters.
	serverSide bool

	cc   jetstream.ConsumeContext
	stop chan struct{}
	done chan struct{}
}

// Errors of the runner.
var (
	ErrConfig  = errors.New("projections: bad configuration")
	ErrStopped = errors.New("projections: runner stopped")
)

// Start restores p's saved state (when StateBucket is set), then consumes
// the log from the position after it and keeps p current until Close.
func Start(ctx context.Context, cfg Config, p Projection) (*Runner, error) {
	if cfg.JS == nil {
		return nil, fmt.Errorf("%w: JS is required", ErrConfig)
	}
	if p == nil {
		return nil, fmt.Errorf("%w: nil projection", ErrConfig)
	}
	if err := checkName(p.Name()); err != nil {
		return nil, err
	}
	if len(p.Filters()) == 0 {
		return nil, fmt.Errorf("%w: projection %s has no filters", ErrConfig, p.Name())
	}
	if cfg.Stream == "" {
		cfg.Stream = events.DefaultStream
	}
	if cfg.SaveEvery < 0 {
		return nil, fmt.Errorf("%w: SaveEvery %s is negative", ErrConfig, cfg.SaveEvery)
	}
	if cfg.SaveEvery == 0 {
		cfg.SaveEvery = 5 * time.Second
	}
	r := &Runner{cfg: cfg, js: cfg.JS, log: cfg.Logger, f: NewFollower(p), changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if r.stream, err = cfg.JS.Stream(ctx, cfg.Stream); err != nil {
		return nil, fmt.Errorf("projections: %s: stream %s: %w", p.Name(), cfg.Stream, err)
	}
	var cons jetstream.Consumer
	if cfg.StateBucket == "" {
		cons, err = r.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: r.serverFilters(), DeliverPolicy: jetstream.DeliverAllPolicy})
	} else {
		cons, err = r.durable(ctx)
	}
	if err != nil {
		return nil, err
	}
	// A pull request lives on the consumer's leader only: when that server
	// dies, nothing is delivered until Consume misses two heartbeats and
	// pulls again. nats.go's defaults made that up to 30s of a read model
	// (the run index) that lags; these make it about 4s.
	r.cc, err = cons.Consume(r.handle, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		r.log.Debug("projections: consume", "projection", p.Name(), "err", err)
	}), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("projections: %s: consume: %w", p.Name(), err)
	}
	go r.saver()
	return r, nil
}

// The pull requests' expiry and heartbeat (see Start).
const (
	pullExpiry    = 10 * time.Second
	pullHeartbeat = 2 * time.Second
)

// serverFilters are the consumer's filters. A projection with several
// wildcard filters reads the whole stream and filters in the client:
// measured here (BenchmarkRebuild), the server steps through an
// interleaved log much slower with several wildcard filters than it
// delivers every message. One filter (a session's transcript) stays on the
// server, which skips other sessions' messages without sending them.
func (r *Runner) serverFilters() []string {
	f := r.f.Projection().Filters()
	if len(f) == 1 {
		r.serverSide = true
		return f
	}
	return []string{events.All}
}

// consumerPrefix starts the names of a projection's durable consumers.
func consumerPrefix(name string) string { return "proj_" + name + "_" }

// durable restores the saved state and positions a durable consumer right
// after it. The consumer acknowledges each event after it is applied, so
// after a clean Close its ack floor is the saved position and it is reused;
// after a crash the ack floor may be ahead of the last saved state, and a
// new consumer is created at the saved position + 1: the events in between
// are applied again to the older state, exactly once. Each new consumer
// gets a new name (start sequence and a random suffix), so an
// acknowledgement still in flight for an earlier one can never acknowledge
// an event the new one has not delivered.
func (r *Runner) durable(ctx context.Context) (jetstream.Consumer, error) {
	p := r.f.Projection()
	var err error
	r.store, err = r.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: r.cfg.StateBucket, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("projections: %s: state bucket %s: %w", p.Name(), r.cfg.StateBucket, err)
	}
	b, err := r.store.GetBytes(ctx, p.Name())
	switch {
	case errors.Is(err, jetstream.ErrObjectNotFound):
	case err != nil:
		return nil, fmt.Errorf("projections: %s: read state: %w", p.Name(), err)
	default:
		if err := r.f.Load(b); err != nil {
			return nil, err
		}
	}
	seq := r.f.Seq()
	filters := r.serverFilters()
	if name := r.f.consumer; name != "" {
		if c, err := r.stream.Consumer(ctx, name); err == nil {
			info, err := c.Info(ctx)
			if err == nil && info.AckFloor.Stream == seq && info.NumAckPending == 0 && sameFilters(info.Config.FilterSubjects, filters) {
				return c, nil
			}
		}
	}
	// Stale consumers of this projection (the last one, or one made by a
	// start that crashed before saving its name) go.
	if err := deleteConsumers(ctx, r.stream, p.Name()); err != nil {
		return nil, err
	}
	name := fmt.Sprintf("%s%d_%s", consumerPrefix(p.Name()), seq+1, randomSuffix())
	cc := jetstream.ConsumerConfig{Durable: name, FilterSubjects: filters, AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxAckPending: 4096, AckWait: 30 * time.Second}
	if seq > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	c, err := r.stream.CreateConsumer(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("projections: %s: create consumer: %w", p.Name(), err)
	}
	r.f.consumer = name
	r.dirty = true // the next save records the consumer's name
	return c, nil
}

// deleteConsumers deletes every durable consumer of a projection.
func deleteConsumers(ctx context.Context, st jetstream.Stream, name string) error {
	names := st.ConsumerNames(ctx)
	var stale []string
	for n := range names.Name() {
		if strings.HasPrefix(n, consumerPrefix(name)) {
			stale = append(stale, n)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("projections: %s: list consumers: %w", name, err)
	}
	for _, n := range stale {
		if err := st.DeleteConsumer(ctx, n); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("projections: %s: delete consumer %s: %w", name, n, err)
		}
	}
	return nil
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func sameFilters(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (r *Runner) handle(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		r.log.Warn("projections: message without metadata", "subject", m.Subject(), "err", err)
		return
	}
	seq := meta.Sequence.Stream
	if !r.serverSide && !matchAny(r.f.Projection().Filters(), m.Subject()) {
		// The position moves past it, and whoever waits for a position
		// (WaitFor) is told: a log that ends with events no filter matches
		// would otherwise leave a waiter asleep until the next match.
		r.mu.Lock()
		r.f.Skip(seq)
		r.dirty = true
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
		if r.cfg.StateBucket != "" {
			_ = m.Ack()
		}
		return
	}
	e, err := r.cfg.Keys.Decode(m.Data())
	if err == nil && e.DataRef != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = Resolve(ctx, r.js, r.cfg.Keys, &e)
		cancel()
	}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	if err != nil {
		// An event this build cannot read does not stop the projection;
		// its position moves past it.
		r.log.Warn("projections: skipped an unreadable event", "projection", r.f.Projection().Name(), "seq", seq, "err", err)
		r.f.Skip(seq)
	} else if _, err := r.f.Offer(Event{Seq: seq, Subject: m.Subject(), Envelope: e}); err != nil {
		r.err = err
		r.log.Error("projections: stopped", "err", err)
		r.mu.Unlock()
		return
	}
	r.dirty = true
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	if r.cfg.StateBucket != "" {
		_ = m.Ack()
	}
}

func (r *Runner) saver() {
	defer close(r.done)
	if r.cfg.StateBucket == "" {
		<-r.stop
		return
	}
	t := time.NewTicker(r.cfg.SaveEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			if err := r.Save(context.Background()); err != nil {
				r.log.Warn("projections: save state", "projection", r.f.Projection().Name(), "err", err)
			}
		}
	}
}

// Save writes the state with its position now, if it changed (a no-op
// without a StateBucket).
func (r *Runner) Save(ctx context.Context) error {
	if r.store == nil {
		return nil
	}
	r.mu.Lock()
	if !r.dirty {
		r.mu.Unlock()
		return nil
	}
	b, err := r.f.Save()
	r.dirty = false
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := r.store.PutBytes(ctx, r.f.Projection().Name(), b); err != nil {
		r.mu.Lock()
		r.dirty = true
		r.mu.Unlock()
		return fmt.Errorf("projections: %s: save state: %w", r.f.Projection().Name(), err)
	}
	return nil
}

// Seq is the last stream sequence the projection applied or passed.
func (r *Runner) Seq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Seq()
}

// Err is the error that stopped the projection, if any.
func (r *Runner) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// WaitFor blocks until the projection's position reaches seq (read your
// writes: pass the sequence a publish was acknowledged with), the
// projection stops on an error, or ctx ends.
func (r *Runner) WaitFor(ctx context.Context, seq uint64) error {
	for {
		r.mu.Lock()
		pos, err, ch := r.f.Seq(), r.err, r.changed
		r.mu.Unlock()
		switch {
		case err != nil:
			return err
		case pos >= seq:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("projections: %s at %d waiting for %d: %w", r.f.Projection().Name(), pos, seq, ctx.Err())
		case <-ch:
		}
	}
}

// CatchUp waits until the projection has applied everything the stream
// held on its filters when CatchUp was called.
func (r *Runner) CatchUp(ctx context.Context) error {
	last, err := LastSeq(ctx, r.stream, r.f.Projection().Filters())
	if err != nil {
		return err
	}
	return r.WaitFor(ctx, last)
}

// LastSeq is the last stream sequence matching any of filters (0 when none).
func LastSeq(ctx context.Context, st jetstream.Stream, filters []string) (uint64, error) {
	var last uint64
	for _, f := range filters {
		m, err := st.GetLastMsgForSubject(ctx, f)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("projections: last of %s: %w", f, err)
		}
		last = max(last, m.Sequence)
	}
	return last, nil
}

// Close stops consuming and saves the state with its position.
func (r *Runner) Close(ctx context.Context) error {
	select {
	case <-r.stop:
		return nil
	default:
	}
	r.cc.Stop()
	<-r.cc.Closed()
	// The acknowledgements of what was applied reach the server before the
	// state is saved: the next start finds the consumer's ack floor at the
	// saved position and reuses it.
	if err := r.js.Conn().FlushWithContext(ctx); err != nil {
		r.log.Debug("projections: flush acknowledgements", "err", err)
	}
	close(r.stop)
	<-r.done
	return r.Save(ctx)
}

// Resolve replaces an event's DataRef (a payload too large for one message,
// kept in the object store) with the payload, checking its size and hash.
func Resolve(ctx context.Context, js jetstream.JetStream, keys *events.Keyring, e *events.Envelope) error {
	if e.DataRef == nil {
		return nil
	}
	ref := e.DataRef
	obs, err := js.ObjectStore(ctx, ref.Bucket)
	if err != nil {
		return fmt.Errorf("projections: payload bucket %s: %w", ref.Bucket, err)
	}
	b, err := obs.GetBytes(ctx, ref.Key)
	if err != nil {
		return fmt.Errorf("projections: payload %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	if b, err = keys.Open(b); err != nil {
		return fmt.Errorf("projections: payload %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != ref.SHA256 || int64(len(b)) != ref.Size {
		return fmt.Errorf("projections: payload %s/%s: %w: content does not match its reference", ref.Bucket, ref.Key, events.ErrMalformed)
	}
	e.Data, e.DataRef = b, nil
	return nil
}
