// Package jetstream is Cairn's production runtime.Store: every checkpoint
// revision of a run is one event in a NATS JetStream stream, written with
// expected-sequence fencing.
//
// # The log
//
// One stream (default CAIRN, subjects cairn.>) holds every session. A
// session's events share cairn.sess.<session>.; every write of a session is
// fenced against the last sequence of the whole session
// (Nats-Expected-Last-Subject-Sequence with its -Subject variant set to
// cairn.sess.<session>.>), so a session's log has exactly one writer at a
// time: a checkpoint commit, a compaction or a lease acquisition by anyone
// else in between makes the write fail, and nothing is stored.
//
//	cairn.sess.<s>.run.<r>.lease   LeaseAcquired: a new owner and epoch of run r
//	cairn.sess.<s>.run.<r>.c.step  CheckpointCommitted: one revision with its Append
//	cairn.sess.<s>.run.<r>.c.done  CheckpointCommitted: the completed revision
//	cairn.sess.<s>.compact         WindowCompacted: the session's new window
//
// A commit is one message, the checkpoint and the transcript messages it
// appends (C12, C17). Opening a run publishes a lease event, which fences
// out every earlier handle (C18). Each commit has a deterministic Nats-Msg-Id
// (session, run, epoch, revision, content hash): after a lost
// acknowledgement the store reads the session's last message and compares
// Msg-Ids before deciding, because the server's answer to a retried publish
// differs by replication (R1: wrong last sequence, 10071; R3: duplicate).
//
// # Durability
//
// The embedded server (StartServer) runs with SyncAlways: an acknowledged
// commit is on disk. ServerConfig.NoSync trades that for throughput; streams
// are never created with async persistence.
package jetstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// Config configures a Store.
type Config struct {
	// Stream is the stream name; "" means events.DefaultStream.
	Stream string
	// Replicas of the stream: 1 on a single server, 3 in a NATS cluster.
	// Zero means 1.
	Replicas int
	// Holder names this process in lease events; "" means "cairn".
	Holder string
	// Schema, when set, is the newest version of the log's schema the
	// store may write: a cluster's level (the newest every member reads,
	// cluster.Provider's Level), so that no member meets an event it
	// cannot read while builds of two versions run side by side. Below 2,
	// every checkpoint lists its calls whole (version 1). Nil is
	// events.SchemaVersion.
	Schema func() int
	// Retries of a publish after a transient error (timeout, no
	// responders, leader change); zero means 5.
	Retries int
	// Backoff is the first retry delay, doubled each time; zero means 20ms.
	Backoff time.Duration
	// Logger receives retry and conflict diagnostics; nil discards them.
	Logger *slog.Logger
	// Now supplies event times; nil means time.Now.
	Now func() time.Time
	// GroupCommit configures how commits are grouped into atomic batches
	// when many runs commit at once (default: adaptive).
	GroupCommit GroupCommit
	// OnCommit, when set, observes every SaveCheckpoint that reached the
	// log: how it was published, its duration and its error (metrics).
	OnCommit func(CommitEvent)
	// OnBatch, when set, observes every atomic batch (metrics).
	OnBatch func(BatchEvent)
	// WriteFaults records whether the streams the store writes store
	// (WriteFaults): the log's and those of its Logs from LogOn. Nil means
	// a WriteFaults of the store's own (Store.WriteFaults); an embedded
	// server given the same one (ServerConfig.WriteFaults) records its
	// stores' write errors there too.
	WriteFaults *WriteFaults
	// Keys, when set, seal every event body and offloaded payload this
	// store writes (AES-256-GCM, events.Keyring) and open sealed ones it
	// reads; plain ones still read. Nil writes plain events, and a sealed
	// one read is an error that says so (events.ErrSealed).
	Keys *events.Keyring
}

// Errors besides the runtime's ErrConflict, ErrLeaseLost, ErrSessionBusy.
var (
	ErrStreamMismatch = errors.New("jetstream: existing stream configuration does not match")
	ErrTooLarge       = errors.New("jetstream: payload too large")
	// ErrClosed is the answer of a Store or Log used after its Close.
	ErrClosed = errors.New("jetstream: closed")
)

// Store opens run stores on one stream.
type Store struct {
	// Every write to the log goes through the Log: checkpoint commits,
	// leases and compactions here, run records through Write.
	*Log
	cfg   Config
	blobs jetstream.ObjectStore
	// maxInline is the largest body kept inline in an event.
	maxInline int
}

const blobBucket = "CAIRN_BLOBS"

// New creates or validates the stream and returns a Store on nc.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	if nc == nil {
		return nil, errors.New("jetstream: New: nil connection")
	}
	if cfg.Stream == "" {
		cfg.Stream = events.DefaultStream
	}
	if err := events.CheckStreamName(cfg.Stream); err != nil {
		return nil, fmt.Errorf("jetstream: Config.Stream: %w", err)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Replicas != 1 && cfg.Replicas != 3 && cfg.Replicas != 5 {
		return nil, fmt.Errorf("jetstream: Config.Replicas: %d, want 1, 3 or 5", cfg.Replicas)
	}
	if cfg.Holder == "" {
		cfg.Holder = "cairn"
	}
	if cfg.Retries == 0 {
		cfg.Retries = 5
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 20 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WriteFaults == nil {
		cfg.WriteFaults = &WriteFaults{}
	}
	if err := cfg.GroupCommit.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	st, err := ensureStream(ctx, js, streamConfig(cfg))
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, Log: newLog(nc, js, st, LogConfig{
		Stream: cfg.Stream, Replicas: cfg.Replicas, Retries: cfg.Retries, Backoff: cfg.Backoff,
		Logger: cfg.Logger, GroupCommit: cfg.GroupCommit, OnBatch: cfg.OnBatch, WriteFaults: cfg.WriteFaults,
	}, nil)}
	err = Setup(ctx, func(ctx context.Context) (err error) {
		s.blobs, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: blobBucket, Storage: jetstream.FileStorage, Replicas: cfg.Replicas})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: object store %s: %w", blobBucket, err)
	}
	// Leave room for headers in the server's payload limit.
	s.maxInline = int(nc.MaxPayload()) - 4096
	return s, nil
}

func streamConfig(cfg Config) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "Cairn run log: checkpoints, leases, compactions",
		Subjects:    []string{events.All},
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxAge:      0,
		// Longer than any retry horizon of a publish.
		Duplicates:  5 * time.Minute,
		AllowDirect: true,
		DenyDelete:  true,
		// Group commit sends atomic batches (nats-server 2.12+).
		AllowAtomicPublish: cfg.GroupCommit.Mode != CommitSingle,
	}
}

// ensureStream creates the stream or checks that the existing one matches
// on everything Cairn's guarantees depend on.
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	var st jetstream.Stream
	lookup := func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, want.Name)
		return err
	}
	err := Setup(ctx, lookup)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		err = Setup(ctx, func(ctx context.Context) (err error) {
			st, err = js.CreateStream(ctx, want)
			return err
		})
		if err == nil {
			return st, nil
		}
		// Another process may have created it meanwhile.
		if err2 := Setup(ctx, lookup); err2 == nil {
			err = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", want.Name, err)
	}
	got := st.CachedInfo().Config
	var bad []string
	if fmt.Sprint(got.Subjects) != fmt.Sprint(want.Subjects) {
		bad = append(bad, fmt.Sprintf("subjects %v, want %v", got.Subjects, want.Subjects))
	}
	if got.Storage != want.Storage {
		bad = append(bad, fmt.Sprintf("storage %s, want %s", got.Storage, want.Storage))
	}
	if got.Replicas != want.Replicas {
		bad = append(bad, fmt.Sprintf("replicas %d, want %d", got.Replicas, want.Replicas))
	}
	if got.Retention != want.Retention {
		bad = append(bad, fmt.Sprintf("retention %s, want %s", got.Retention, want.Retention))
	}
	if !got.AllowDirect {
		bad = append(bad, "allow_direct is off")
	}
	if got.PersistMode != jetstream.DefaultPersistMode {
		bad = append(bad, "persist_mode is async: acknowledged commits could be lost")
	}
	if got.Duplicates < time.Minute {
		bad = append(bad, fmt.Sprintf("duplicate window %s, want at least 1m", got.Duplicates))
	}
	if got.MaxAge != 0 || got.MaxMsgs > 0 || got.MaxBytes > 0 || got.MaxMsgsPerSubject > 0 {
		bad = append(bad, "limits would discard committed events")
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w: stream %s: %v", ErrStreamMismatch, want.Name, bad)
	}
	if want.AllowAtomicPublish && !got.AllowAtomicPublish {
		// A stream made before group commit (or by CommitSingle): turning
		// atomic publish on changes nothing stored.
		upd := got
		upd.AllowAtomicPublish = true
		if err = Setup(ctx, func(ctx context.Context) (err error) {
			st, err = js.UpdateStream(ctx, upd)
			return err
		}); err != nil {
			return nil, fmt.Errorf("jetstream: stream %s: enabling atomic batch publish for group commit (needs nats-server 2.12+; Config.GroupCommit.Mode single works without it): %w", want.Name, err)
		}
	}
	return st, nil
}

// Open acquires the lease of a run and returns the store scoped to it. A
// completed run opens read-only without a lease (its reply can be returned,
// C7). A run of a session whose admitted run has not completed is refused
// with runtime.ErrSessionBusy (C18).
func (s *Store) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	if err := validOpen(sessionID, runID); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt <= s.cfg.Retries; attempt++ {
		h, err := s.open(ctx, sessionID, runID)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, runtime.ErrConflict) || ctx.Err() != nil {
			return nil, err
		}
		lastErr = err // someone wrote to the session meanwhile: read again
	}
	return nil, lastErr
}

// validOpen checks the IDs of a run to open.
func validOpen(sessionID, runID string) error {
	if err := events.ValidID(sessionID); err != nil {
		return fmt.Errorf("jetstream: open: session: %w", err)
	}
	if err := events.ValidID(runID); err != nil {
		return fmt.Errorf("jetstream: open: run: %w", err)
	}
	return nil
}

func (s *Store) open(ctx context.Context, sessionID, runID string) (*RunStore, error) {
	h := &RunStore{s: s, session: sessionID, run: runID}
	last, err := s.last(ctx, events.SessionAll(sessionID))
	if err != nil {
		return nil, err
	}
	if last != nil {
		h.seq = last.Sequence
	}
	// One read for the rest (a multi-last direct get on a single replica):
	// the run's checkpoint, its lease, the session's latest lease and
	// compaction (kept for the window, which every run that commits loads).
	// After the fence's read, never at once: a write between the two
	// reads then fails the lease's publish, where with the rest read first
	// a lease taken meanwhile could be missed and its epoch taken again.
	lasts, err := s.Lasts(ctx, events.RunCheckpoints(sessionID, runID), events.RunLease(sessionID, runID),
		events.SessionLeases(sessionID), events.SessionCompactions(sessionID))
	if err != nil {
		return nil, err
	}
	if err := h.readCheckpoint(ctx, lasts[0]); err != nil {
		return nil, err
	}
	if h.completed {
		// A read-only handle loads its window later, whenever asked: from
		// the compaction of that moment, as the log then has it.
		return h, nil
	}
	h.compaction, h.compactionRead = lasts[3], true
	lease, err := s.leaseOf(lasts[1])
	if err != nil {
		return nil, err
	}
	// The session's admitted run is the one with the latest lease.
	other, err := s.leaseOf(lasts[2])
	if err != nil {
		return nil, err
	}
	if other != nil && other.RunID != runID {
		done, err := s.runCompleted(ctx, sessionID, other.RunID)
		if err != nil {
			return nil, err
		}
		if !done {
			return nil, fmt.Errorf("jetstream: open run %s: %w (%s)", runID, runtime.ErrSessionBusy, other.RunID)
		}
	}
	epoch := int64(1)
	if lease != nil {
		epoch = lease.Epoch + 1
	}
	if err := h.takeLease(ctx, epoch); err != nil {
		return nil, err
	}
	return h, nil
}

// OpenCreated is Open for a run whose session holds nothing but the run's
// own record, at sequence seq: the caller created the record fenced on an
// empty session, and has read nothing of the session since. It takes the
// lease (epoch 1) without a read: the lease's write is fenced on seq, so it
// lands only while the session is as the caller left it (no end or purge,
// no one's lease or commit), and the handle starts from that empty session
// (no checkpoint, no window to read). A session that moved on fails it
// with an error wrapping runtime.ErrConflict, and nothing is written: open
// the run with Open then.
func (s *Store) OpenCreated(ctx context.Context, sessionID, runID string, seq uint64) (*RunStore, error) {
	if err := validOpen(sessionID, runID); err != nil {
		return nil, err
	}
	if seq == 0 {
		return nil, fmt.Errorf("jetstream: open run %s: no record sequence", runID)
	}
	h := &RunStore{s: s, session: sessionID, run: runID, seq: seq, compactionRead: true, loaded: true, ids: map[string]bool{}}
	if err := h.takeLease(ctx, 1); err != nil {
		return nil, err
	}
	return h, nil
}

// takeLease writes the run's lease at epoch, fenced on the session's last
// sequence as the handle read it (h.seq).
func (h *RunStore) takeLease(ctx context.Context, epoch int64) error {
	s := h.s
	ev, err := events.New(events.LeaseAcquired, h.session, h.run, h.rev, epoch, s.cfg.Now(), events.Lease{Holder: s.cfg.Holder, Epoch: epoch})
	if err != nil {
		return err
	}
	// The Msg-Id is this take's own: one every taker of the epoch shared
	// made a taker that lost the race read the winner's lease, found its
	// own Msg-Id on it, and take it for its own lost acknowledgement: two
	// holders of one epoch. Its retries and settling use this one id.
	id := uniqueID(fmt.Sprintf("%s.%s.lease.%d.", h.session, h.run, epoch))
	// Through the committer: an activation's lease shares a batch, and a
	// flush, with other runs' commits when many runs start at once.
	seq, _, err := h.commit(ctx, events.RunLease(h.session, h.run), ev, id)
	if err != nil {
		return fmt.Errorf("jetstream: open run %s: lease: %w", h.run, err)
	}
	h.seq, h.epoch = seq, epoch
	return nil
}

type leaseInfo struct {
	RunID string
	Epoch int64
}

func (s *Store) lastLease(ctx context.Context, subject string) (*leaseInfo, error) {
	m, err := s.last(ctx, subject)
	if err != nil {
		return nil, err
	}
	return s.leaseOf(m)
}

// leaseOf decodes a lease event; nil for none.
func (s *Store) leaseOf(m *jetstream.RawStreamMsg) (*leaseInfo, error) {
	if m == nil {
		return nil, nil
	}
	e, err := s.cfg.Keys.Decode(m.Data)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %s seq %d: %w", m.Subject, m.Sequence, err)
	}
	var l events.Lease
	if err := e.Payload(&l); err != nil {
		return nil, err
	}
	return &leaseInfo{RunID: e.RunID, Epoch: l.Epoch}, nil
}

func (s *Store) runCompleted(ctx context.Context, sessionID, runID string) (bool, error) {
	m, err := s.last(ctx, events.RunCheckpoints(sessionID, runID))
	if err != nil || m == nil {
		return false, err
	}
	cp, err := s.DecodeCheckpoint(ctx, m)
	if err != nil {
		return false, err
	}
	return cp.Reply != nil, nil
}

// transient reports errors after which a retry may succeed and the outcome
// of a publish is unknown.
func transient(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10163, // new leader still applying
			10158: // duplicate message ID in process
			return true
		}
		return false
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}

// conflict reports a wrong-last-sequence answer: R1 says 10071, replicated
// streams 10164.
func conflict(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// DecodeCheckpoint decodes a CheckpointCommitted message read from the
// log (Last, Lasts), fetching an out-of-line payload from the object store.
// Its UsedCallIDs and Calls are those the event lists: when the event has
// a base (events.Checkpoint.UsedCallIDsBase), only the IDs added since;
// after its response's listing (CallsBaseRev), only the calls it changed.
// A run's handle (LoadCheckpoint) and LastCheckpoint have them whole.
func (s *Store) DecodeCheckpoint(ctx context.Context, m *jetstream.RawStreamMsg) (*runtime.Checkpoint, error) {
	p, _, _, err := s.decodeCheckpointOf(ctx, m)
	if err != nil {
		return nil, err
	}
	return &p.Checkpoint, nil
}

// decodeCheckpointOf is DecodeCheckpoint that returns the whole payload
// (with the used-call-ID base) and the event's session and run.
func (s *Store) decodeCheckpointOf(ctx context.Context, m *jetstream.RawStreamMsg) (_ *events.Checkpoint, session, run string, err error) {
	e, err := s.cfg.Keys.Decode(m.Data)
	if err != nil {
		return nil, "", "", fmt.Errorf("jetstream: %s seq %d: %w", m.Subject, m.Sequence, err)
	}
	p, err := s.payloadOf(ctx, e)
	if err != nil {
		return nil, "", "", fmt.Errorf("jetstream: %s seq %d: %w", m.Subject, m.Sequence, err)
	}
	return p, e.SessionID, e.RunID, nil
}

// payloadOf resolves a checkpoint event's payload (the object store holds
// a large one) and decodes it, its bases checked (events.DecodeCheckpoint).
func (s *Store) payloadOf(ctx context.Context, e events.Envelope) (*events.Checkpoint, error) {
	if err := s.resolve(ctx, &e); err != nil {
		return nil, err
	}
	return events.DecodeCheckpoint(e)
}

// runCheckpoint decodes data's envelope and reports whether it is a
// checkpoint of run runID in sessionID: in a copy of the log, a sequence
// where the run's checkpoint was may hold anything.
func (s *Store) runCheckpoint(data []byte, sessionID, runID string) (events.Envelope, bool) {
	e, err := s.cfg.Keys.Decode(data)
	return e, err == nil && e.Type == events.CheckpointCommitted && e.SessionID == sessionID && e.RunID == runID
}

// resolve replaces an event's DataRef with the payload it points at.
func (s *Store) resolve(ctx context.Context, e *events.Envelope) error {
	if e.DataRef == nil {
		return nil
	}
	ref := e.DataRef
	ctx, cancel := context.WithTimeout(ctx, blobTimeout)
	defer cancel()
	b, err := s.blobs.GetBytes(ctx, ref.Key)
	if err != nil {
		return fmt.Errorf("jetstream: payload %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	if b, err = s.cfg.Keys.Open(b); err != nil {
		return fmt.Errorf("jetstream: payload %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != ref.SHA256 || int64(len(b)) != ref.Size {
		return fmt.Errorf("jetstream: payload %s/%s: %w: content does not match its reference", ref.Bucket, ref.Key, events.ErrMalformed)
	}
	e.Data, e.DataRef = b, nil
	return nil
}

// RunStore is the runtime.Store of one run: the run's only writer while its
// lease holds. It caches what it wrote, so after the first load it serves
// LoadCheckpoint and Load without reading the log.
type RunStore struct {
	s       *Store
	session string
	run     string

	mu        sync.Mutex
	epoch     int64 // 0: a read-only handle of a completed run
	seq       uint64
	rev       int64
	cpData    []byte // the committed checkpoint as encoded in the log, for identical retries
	completed bool
	phase     runtime.Phase // the committed checkpoint's ("" before revision 1)
	// used is every call ID the committed checkpoint lists. The log lists
	// them in full only now and then (at most every maxUsedCallIDsDelta
	// IDs); in between, a revision lists those added since the last full
	// listing, its base (events.Checkpoint.UsedCallIDsBase): base (zero:
	// none known, the next revision lists in full). lastFull is whether
	// the committed revision was one (an identical retry is encoded as it
	// was).
	used     []string
	base     listing
	lastFull bool
	// calls is the committed checkpoint's whole call journal. The log
	// lists a response's calls whole once; each later revision of it lists
	// the calls it changed from the revision before (events.CallDelta), on
	// callsBase, the listing (zero: none, the next revision lists whole).
	// prevCalls and lastDelta are what the committed revision was encoded
	// on (the journal before it, and whether it listed changes on
	// callsBase), so an identical retry is encoded as it was.
	calls     []runtime.CallRecord
	callsBase listing
	prevCalls []runtime.CallRecord
	lastDelta bool
	// foldLater is the last checkpoint of a completed run, read at
	// foldSeq, whose calls are changes only: a read-only handle folds its
	// journal when it is first loaded, not at Open.
	foldLater *events.Checkpoint
	foldSeq   uint64
	window    []model.Message
	ids       map[string]bool
	loaded    bool
	// compaction is the session's last compaction when the handle was
	// opened (nil: none), read with the rest at Open: loadWindow starts
	// from it. compactionRead is false on a handle made without Open.
	compaction     *jetstream.RawStreamMsg
	compactionRead bool
	// ledger is the budget totals the committed checkpoint carries (nil:
	// none), and charger, when set, what each new revision carries
	// (SetLedger).
	ledger  *events.Ledger
	charger Charger
}

// Charger keeps a run's budget totals in the run's own commits
// (events.Checkpoint.Ledger): a root run that nothing else draws on
// charges its steps and tokens in the writes it makes anyway, instead of
// in writes of their own (actors).
type Charger interface {
	// Charge returns the totals the commit of cp carries, from those of
	// the committed revision (nil: none yet). It is called once per new
	// revision, under the handle's lock, before the write: an identical
	// retry of the committed revision charges nothing again.
	Charge(cp *runtime.Checkpoint, last *events.Ledger) *events.Ledger
	// Charged is told that the commit of cp, carrying l, landed.
	Charged(cp *runtime.Checkpoint, l *events.Ledger)
}

// SetLedger makes every later commit of the handle carry the totals c
// charges (nil: none). A run's first totals need the store to write
// events.LedgerVersion or later (SaveCheckpoint refuses them below it); a
// run whose log holds totals already goes on carrying them at any level.
func (h *RunStore) SetLedger(c Charger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.charger = c
}

// Ledger returns the budget totals the run's committed checkpoint carries
// (nil: none, or the handle has no checkpoint yet).
func (h *RunStore) Ledger() *events.Ledger {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ledger == nil {
		return nil
	}
	l := *h.ledger
	return &l
}

// Revision is the run's committed revision (0: none yet).
func (h *RunStore) Revision() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

var (
	_ runtime.Store   = (*RunStore)(nil)
	_ session.Auditor = (*RunStore)(nil)
)

func (h *RunStore) readCheckpoint(ctx context.Context, m *jetstream.RawStreamMsg) error {
	if m == nil {
		return nil
	}
	p, _, _, err := h.s.decodeCheckpointOf(ctx, m)
	if err != nil {
		return err
	}
	cp := &p.Checkpoint
	h.rev, h.completed, h.phase, h.ledger = cp.Revision, cp.Reply != nil, cp.Phase, p.Ledger
	if h.used, h.base, err = h.s.usedCallIDs(ctx, m.Sequence, p, h.session, h.run); err != nil {
		return err
	}
	h.lastFull = p.UsedCallIDsBase == 0
	if p.ListsCalls() {
		h.calls, h.prevCalls, h.lastDelta = cp.Calls, nil, false
		h.callsBase = listing{}
		if len(cp.Calls) > 0 {
			h.callsBase = listing{seq: m.Sequence, rev: cp.Revision, n: len(cp.Calls)}
		}
	} else {
		h.lastDelta = true
		if h.completed {
			h.foldLater, h.foldSeq = p, m.Sequence
		} else if h.calls, h.prevCalls, h.callsBase, err = h.s.journalOf(ctx, h.session, h.run, m.Sequence, p); err != nil {
			return err
		}
	}
	h.cpData, err = json.Marshal(cp) // as the log has it: on its bases
	return err
}

// journalOf folds the whole call journal of checkpoint p, read at seq,
// which lists only the calls it changed: from the listing it names
// (p.CallsBase, found by its revision in a copy of the log whose sequences
// differ) through every revision of the run up to p. It returns the
// journal, the one of the revision before p, and the listing.
func (s *Store) journalOf(ctx context.Context, sessionID, runID string, seq uint64, p *events.Checkpoint) (calls, prev []runtime.CallRecord, base listing, err error) {
	rev, baseRev := p.Checkpoint.Revision, p.CallsBaseRev
	fail := func(err error) ([]runtime.CallRecord, []runtime.CallRecord, listing, error) {
		return nil, nil, listing{}, fmt.Errorf("jetstream: run %s: calls of revision %d on revision %d: %w", runID, rev, baseRev, err)
	}
	// The listing at the sequence p names, or, in a copy of the log whose
	// sequences differ, somewhere among the run's checkpoints before p.
	start := uint64(1)
	if b := p.CallsBase; b > 0 && b < seq {
		m, err := s.bySeq(ctx, b)
		if err != nil {
			return fail(err)
		}
		if m != nil {
			if e, ok := s.runCheckpoint(m.Data, sessionID, runID); ok && e.Revision == baseRev {
				start = b
			}
		}
	}
	// Folded in log order: the listing first, then each revision after it.
	at := baseRev - 1 // the revision folded last
	fold := func(m *rawMsg) error {
		e, ok := s.runCheckpoint(m.data, sessionID, runID)
		if !ok || e.Revision < baseRev || e.Revision > rev {
			return nil
		}
		if e.Revision != at+1 {
			return fmt.Errorf("%w: revision %d follows %d", events.ErrMalformed, e.Revision, at)
		}
		q, err := s.payloadOf(ctx, e)
		if err != nil {
			return err
		}
		switch {
		case e.Revision == baseRev:
			if !q.ListsCalls() {
				return fmt.Errorf("%w: seq %d does not list the calls whole", events.ErrMalformed, m.seq)
			}
			calls, base = q.Checkpoint.Calls, listing{seq: m.seq, rev: baseRev, n: len(q.Checkpoint.Calls)}
		case q.CallsBaseRev != baseRev:
			return fmt.Errorf("%w: revision %d builds on revision %d, not %d", events.ErrMalformed, e.Revision, q.CallsBaseRev, baseRev)
		default:
			next, err := events.ApplyCalls(calls, q.Checkpoint.Calls, q.CallsAt)
			if err != nil {
				return err
			}
			prev, calls = calls, next
		}
		at = e.Revision
		if at == rev {
			return errFound
		}
		return nil
	}
	err = s.scan(ctx, events.RunCheckpoints(sessionID, runID), start, seq, fold)
	switch {
	case errors.Is(err, errFound):
		return calls, prev, base, nil
	case err != nil:
		return fail(err)
	}
	return fail(fmt.Errorf("%w: the run's revisions from %d to %d are not all in the log", events.ErrMalformed, baseRev, rev))
}

// usedCallIDs returns every used call ID of the checkpoint p, read at seq,
// and the full listing they build on: p itself, or its base.
func (s *Store) usedCallIDs(ctx context.Context, seq uint64, p *events.Checkpoint, sessionID, runID string) ([]string, listing, error) {
	own := p.Checkpoint.UsedCallIDs
	if p.UsedCallIDsBase == 0 {
		return own, listing{seq: seq, rev: p.Checkpoint.Revision, n: len(own)}, nil
	}
	ids, base, err := s.usedCallIDsAt(ctx, sessionID, runID, p.UsedCallIDsBase, p.UsedCallIDsBaseRev)
	if err != nil {
		return nil, listing{}, err
	}
	return append(ids[:len(ids):len(ids)], own...), base, nil
}

// listing is a checkpoint event that lists every used call ID of its run:
// its log sequence, its revision and how many it lists.
type listing struct {
	seq uint64
	rev int64
	n   int
}

// usedCallIDsAt reads the full listing of a run's used call IDs that a
// later revision builds on: the run's checkpoint at revision rev, found at
// seq in this log (read from the leader: it must be there), or, in a copy
// of the log whose sequences differ, among the run's checkpoints.
func (s *Store) usedCallIDsAt(ctx context.Context, sessionID, runID string, seq uint64, rev int64) ([]string, listing, error) {
	fail := func(err error) ([]string, listing, error) {
		return nil, listing{}, fmt.Errorf("jetstream: run %s: used call IDs of revision %d (seq %d): %w", runID, rev, seq, err)
	}
	// match decodes m if it is the listing: the run's checkpoint at rev
	// (nil, nil for any other message: in a copy of the log, seq may hold
	// anything, even a payload whose object is not there).
	match := func(m *rawMsg) (*events.Checkpoint, error) {
		e, ok := s.runCheckpoint(m.data, sessionID, runID)
		if !ok || e.Revision != rev {
			return nil, nil
		}
		p, err := s.payloadOf(ctx, e)
		if err != nil {
			return nil, err
		}
		if p.Checkpoint.Revision != rev || p.UsedCallIDsBase != 0 {
			return nil, fmt.Errorf("%w: seq %d is not a full listing at revision %d", events.ErrMalformed, m.seq, rev)
		}
		return p, nil
	}
	m, err := s.bySeq(ctx, seq)
	if err != nil {
		return fail(err)
	}
	if m != nil {
		p, err := match(&rawMsg{subject: m.Subject, seq: m.Sequence, header: m.Header, data: m.Data})
		if err != nil {
			return fail(err)
		}
		if p != nil {
			return p.Checkpoint.UsedCallIDs, listing{seq: seq, rev: rev, n: len(p.Checkpoint.UsedCallIDs)}, nil
		}
	}
	// Not there: a copy of the log whose sequences differ. Find it among
	// the run's checkpoints, up to the last.
	filter := events.RunCheckpoints(sessionID, runID)
	last, err := s.last(ctx, filter)
	if err != nil {
		return fail(err)
	}
	var found *events.Checkpoint
	var at uint64
	if last != nil {
		err = s.scan(ctx, filter, 1, last.Sequence, func(m *rawMsg) error {
			p, err := match(m)
			if p != nil {
				found, at = p, m.seq
				return errFound
			}
			return err
		})
	}
	switch {
	case errors.Is(err, errFound):
	case err != nil:
		return fail(err)
	case found == nil:
		return fail(fmt.Errorf("%w: the run has no checkpoint at that revision", events.ErrMalformed))
	}
	return found.Checkpoint.UsedCallIDs, listing{seq: at, rev: rev, n: len(found.Checkpoint.UsedCallIDs)}, nil
}

// errFound ends a scan that found what it looked for.
var errFound = errors.New("found")

// Close ends the Store (its Log: Log.Close). Logs made by
// LogOn are their callers' to close; run handles fail after it.
func (s *Store) Close(ctx context.Context) error { return s.Log.Close(ctx) }

// WriteFaults is where the store records whether its streams store
// (Config.WriteFaults, or the store's own).
func (s *Store) WriteFaults() *WriteFaults { return s.cfg.WriteFaults }

// AwaitsModel reports whether the run's next step is a model request: a
// writable handle of a run with no checkpoint yet (its first commit,
// revision 1, is of the model phase) or whose checkpoint is of the model
// phase. A node reserves that step while the attempt starts (actors).
func (h *RunStore) AwaitsModel() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch > 0 && !h.completed && (h.rev == 0 || h.phase == runtime.PhaseModel)
}

// LoadCheckpoint implements runtime.Store.
func (h *RunStore) LoadCheckpoint(ctx context.Context) (*runtime.Checkpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cpData == nil {
		return nil, nil
	}
	var cp runtime.Checkpoint
	if err := json.Unmarshal(h.cpData, &cp); err != nil {
		return nil, fmt.Errorf("jetstream: load checkpoint: %w", err)
	}
	cp.UsedCallIDs = slices.Clone(h.used)
	if h.foldLater != nil {
		calls, prev, base, err := h.s.journalOf(ctx, h.session, h.run, h.foldSeq, h.foldLater)
		if err != nil {
			return nil, err
		}
		h.calls, h.prevCalls, h.callsBase, h.foldLater = calls, prev, base, nil
	}
	cp.Calls = slices.Clone(h.calls)
	return &cp, nil
}

// maxUsedCallIDsDelta is the most used call IDs a revision lists on top
// of its base before one lists them all again: a run of n calls writes
// O(n·64 + n²/64) IDs in all, where a full listing in every revision
// wrote O(n²) (a run of 1,000 calls with provider-length IDs: 16 MB).
const maxUsedCallIDsDelta = 64

// encode returns cp as the log stores it, and the bases it names: with
// every used call ID (full), or with those added since the base listing;
// with its calls whole, or (delta) with those changed from prev, the
// journal of the revision before, on the listing callsBase. delta is
// whether it could be: cp's journal is prev's with states changed.
func (h *RunStore) encode(cp *runtime.Checkpoint, full bool, prev []runtime.CallRecord, callsBase listing) (b []byte, on events.Bases, delta bool, err error) {
	c := *cp
	if !full {
		c.UsedCallIDs = cp.UsedCallIDs[h.base.n:]
		on.UsedSeq, on.UsedRev = h.base.seq, h.base.rev
	}
	if callsBase.rev > 0 {
		if changed, at, ok := events.CallDelta(prev, cp.Calls); ok {
			c.Calls, delta = changed, true
			on.CallsSeq, on.CallsRev, on.CallsAt = callsBase.seq, callsBase.rev, at
		}
	}
	b, err = json.Marshal(&c)
	return b, on, delta, err
}

// commitID is a checkpoint commit's Msg-Id, session.run.epoch.revision.hash:
// hash is the first 8 bytes, in hex, of the SHA-256 of its checkpoint JSON
// followed by "ledger <steps> <input> <output>" when it carries budget
// totals. Built with appends: it is computed for every commit.
func commitID(session, run string, epoch, rev int64, checkpoint []byte, l *events.Ledger) string {
	hash := sha256.New()
	hash.Write(checkpoint)
	if l != nil {
		var tail [80]byte
		t := append(tail[:0], "ledger "...)
		t = strconv.AppendInt(t, int64(l.Steps), 10)
		t = append(t, ' ')
		t = strconv.AppendInt(t, l.InputTokens, 10)
		t = append(t, ' ')
		t = strconv.AppendInt(t, l.OutputTokens, 10)
		hash.Write(t)
	}
	var sum [sha256.Size]byte
	hash.Sum(sum[:0])
	id := make([]byte, 0, len(session)+len(run)+60)
	id = append(id, session...)
	id = append(id, '.')
	id = append(id, run...)
	id = append(id, '.')
	id = strconv.AppendInt(id, epoch, 10)
	id = append(id, '.')
	id = strconv.AppendInt(id, rev, 10)
	id = append(id, '.')
	id = hex.AppendEncode(id, sum[:8])
	return string(id)
}

// extendsBase reports whether ids starts with the base listing, so that
// a revision can list the rest alone.
func (h *RunStore) extendsBase(ids []string) bool {
	return h.base.seq > 0 && len(ids) >= h.base.n && slices.Equal(ids[:h.base.n], h.used[:h.base.n])
}

// SaveCheckpoint implements runtime.Store.
func (h *RunStore) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if cp == nil {
		return errors.New("jetstream: save checkpoint: nil checkpoint")
	}
	for i, m := range cp.Append {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("jetstream: save checkpoint rev %d: append[%d]: %w", cp.Revision, i, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.epoch == 0:
		return fmt.Errorf("jetstream: save run %s: the run is completed (read-only handle): %w", h.run, runtime.ErrConflict)
	case cp.Revision == h.rev && h.rev > 0:
		if h.lastFull || h.extendsBase(cp.UsedCallIDs) {
			base := listing{}
			if h.lastDelta {
				base = h.callsBase
			}
			b, _, delta, err := h.encode(cp, h.lastFull, h.prevCalls, base)
			if err == nil && delta == h.lastDelta && bytes.Equal(b, h.cpData) {
				return nil // identical retry of the committed revision (C13)
			}
		}
		return fmt.Errorf("jetstream: save run %s rev %d: differs from the committed revision: %w", h.run, cp.Revision, runtime.ErrConflict)
	case cp.Revision != h.rev+1:
		return fmt.Errorf("jetstream: save run %s rev %d: current revision is %d: %w", h.run, cp.Revision, h.rev, runtime.ErrConflict)
	}
	full := !h.extendsBase(cp.UsedCallIDs) || len(cp.UsedCallIDs)-h.base.n > maxUsedCallIDsDelta
	version := h.s.WriteVersion()
	callsBase := h.callsBase
	if version < 2 { // a reader of version 1 takes calls for the whole journal
		callsBase = listing{}
	}
	b, on, delta, err := h.encode(cp, full, h.calls, callsBase)
	if err != nil {
		return fmt.Errorf("jetstream: save checkpoint: %w", err)
	}
	if h.charger != nil {
		// A run's first totals need a log every member reads at version
		// 4. A run whose log holds them already goes on at any level (a
		// member that joins, or restarts, writes at level 1 until it has
		// seen the others): a build that cannot read version 4 cannot read
		// this run's log anyway, and keeping its budget there loses
		// nothing.
		if on.Ledger = h.charger.Charge(cp, h.ledger); on.Ledger != nil && version < events.LedgerVersion && h.ledger == nil {
			return fmt.Errorf("jetstream: save run %s rev %d: budget totals in the log need schema version %d, the store writes %d", h.run, cp.Revision, events.LedgerVersion, version)
		}
	}
	if err := h.loadWindow(ctx); err != nil {
		return err
	}
	for i, m := range cp.Append {
		if h.ids[m.ID] {
			return fmt.Errorf("jetstream: save run %s rev %d: append[%d]: message %s already in the window: %w", h.run, cp.Revision, i, m.ID, runtime.ErrConflict)
		}
	}
	ev := events.NewCommit(h.session, h.run, cp.Revision, h.epoch, h.s.cfg.Now(), b, on) // version 2 when it lists changes only
	// The Msg-Id names what the revision writes, its totals too: a lost
	// acknowledgement is settled only by this very commit.
	id := commitID(h.session, h.run, h.epoch, cp.Revision, b, on.Ledger)
	start := time.Now()
	seq, mode, err := h.commit(ctx, events.CheckpointSubject(h.session, h.run, cp.Reply != nil), ev, id)
	if h.s.cfg.OnCommit != nil {
		h.s.cfg.OnCommit(CommitEvent{Mode: mode, Duration: time.Since(start), Err: err})
	}
	if err != nil {
		return fmt.Errorf("jetstream: save run %s rev %d: %w", h.run, cp.Revision, err)
	}
	h.seq, h.rev, h.cpData = seq, cp.Revision, b
	h.completed, h.phase, h.ledger = cp.Reply != nil, cp.Phase, on.Ledger
	if h.charger != nil {
		h.charger.Charged(cp, on.Ledger)
	}
	if ids := cp.UsedCallIDs; !full && len(ids) >= len(h.used) && slices.Equal(ids[h.base.n:len(h.used)], h.used[h.base.n:]) {
		h.used = append(h.used, ids[len(h.used):]...) // the usual case: a few IDs more
	} else {
		h.used = slices.Clone(ids)
	}
	h.lastFull = full
	if full {
		h.base = listing{seq: seq, rev: cp.Revision, n: len(cp.UsedCallIDs)}
	}
	// The journal as committed, for the next revision's delta (the runner
	// changes its own): into the array of the revision before the one
	// before, which nothing else holds (calls and prevCalls are this
	// handle's copies), rather than a new one per commit.
	h.prevCalls, h.calls, h.lastDelta = h.calls, append(h.prevCalls[:0], cp.Calls...), delta
	switch {
	case delta:
	case len(cp.Calls) > 0:
		h.callsBase = listing{seq: seq, rev: cp.Revision, n: len(cp.Calls)}
	default:
		h.callsBase = listing{}
	}
	for _, m := range cp.Append {
		h.window = append(h.window, m)
		h.ids[m.ID] = true
	}
	return nil
}

// commit writes one event fenced against the session's last sequence,
// through the committer (it may share one atomic batch, and one flush,
// with other runs' writes), and resolves every ambiguous answer by reading
// the log. Callers hold h.mu (or own h exclusively).
func (h *RunStore) commit(ctx context.Context, subject string, ev events.Envelope, id string) (uint64, string, error) {
	msg, err := h.message(ctx, subject, ev, id)
	if err != nil {
		return 0, "single", err
	}
	return h.s.commits.commit(ctx, msg, id, events.SessionAll(h.session), h.seq, func() (uint64, error) {
		return h.publishMsg(ctx, msg, id)
	})
}

// message encodes an event, its payload moved to the object store when it
// is too large for one message.
func (h *RunStore) message(ctx context.Context, subject string, ev events.Envelope, id string) (*nats.Msg, error) {
	body, hdrs, err := h.s.cfg.Keys.Encode(ev, id)
	if err != nil {
		return nil, err
	}
	if len(body) > h.s.maxInline {
		if body, hdrs, err = h.offload(ctx, ev, id); err != nil {
			return nil, err
		}
	}
	msg := &nats.Msg{Subject: subject, Data: body, Header: make(nats.Header, len(hdrs)+3)}
	for k, v := range hdrs {
		msg.Header[k] = []string{v}
	}
	return msg, nil
}

// publishMsg is the single-publish path: one fenced publish, retried on
// transient errors, every ambiguous answer settled by reading the log.
func (h *RunStore) publishMsg(ctx context.Context, msg *nats.Msg, id string) (uint64, error) {
	return h.s.publish(ctx, msg, id, events.SessionAll(h.session), h.seq, func(ctx context.Context, cause error) (uint64, error) {
		return h.settle(ctx, id, cause)
	})
}

// settle decides a write the server refused: committed (our Msg-Id is the
// session's last message), fenced out by a newer lease (ErrLeaseLost), or
// a conflict.
func (h *RunStore) settle(ctx context.Context, id string, cause error) (uint64, error) {
	s := h.s
	last, err := s.last(ctx, events.SessionAll(h.session))
	if err != nil {
		return 0, fmt.Errorf("jetstream: %v; then: %w", cause, err)
	}
	if last != nil && last.Header.Get(jetstream.MsgIDHeader) == id {
		return last.Sequence, nil
	}
	if h.epoch > 0 {
		lease, err := s.lastLease(ctx, events.RunLease(h.session, h.run))
		if err == nil && lease != nil && lease.Epoch > h.epoch {
			return 0, fmt.Errorf("run %s: epoch %d fenced out by epoch %d: %w", h.run, h.epoch, lease.Epoch, runtime.ErrLeaseLost)
		}
	}
	s.log.Info("jetstream: write conflict", "session", h.session, "run", h.run, "msg_id", id, "err", cause)
	return 0, fmt.Errorf("session %s moved on (expected last sequence %d): %w", h.session, h.seq, runtime.ErrConflict)
}

// offload puts an event's payload in the object store and returns a body
// that references it. The put is idempotent by key; a crash before the
// event leaves an unreferenced object, never a dangling reference.
func (h *RunStore) offload(ctx context.Context, ev events.Envelope, id string) ([]byte, map[string]string, error) {
	sum := sha256.Sum256(ev.Data)
	blob := ev.Data
	key := id + "." + hex.EncodeToString(sum[:8])
	if keys := h.s.cfg.Keys; keys != nil {
		// Sealed like the events; the object's name then hashes the
		// sealed bytes, since a hash of the plaintext would let a reader
		// of the bucket confirm a guessed payload.
		blob = keys.Seal(ev.Data)
		sealedSum := sha256.Sum256(blob)
		key = id + "." + hex.EncodeToString(sealedSum[:8])
	}
	pctx, cancel := context.WithTimeout(ctx, blobTimeout)
	defer cancel()
	if _, err := h.s.blobs.PutBytes(pctx, key, blob); err != nil {
		return nil, nil, fmt.Errorf("jetstream: store payload %s: %w", key, err)
	}
	ev.DataRef = &events.ObjectRef{Bucket: blobBucket, Key: key, Size: int64(len(ev.Data)), SHA256: hex.EncodeToString(sum[:])}
	ev.Data = nil
	body, hdrs, err := h.s.cfg.Keys.Encode(ev, id)
	if err != nil {
		return nil, nil, err
	}
	if len(body) > h.s.maxInline {
		return nil, nil, fmt.Errorf("%w: event %s is %d bytes even with its payload out of line (limit %d)", ErrTooLarge, id, len(body), h.s.maxInline)
	}
	return body, hdrs, nil
}

// loadWindow reads the session's current window once: the last compaction's
// window and every Append committed after it. Callers hold h.mu.
func (h *RunStore) loadWindow(ctx context.Context) error {
	if h.loaded {
		return nil
	}
	var window []model.Message
	var start uint64 = 1
	m := h.compaction
	if !h.compactionRead {
		var err error
		if m, err = h.s.last(ctx, events.SessionCompactions(h.session)); err != nil {
			return err
		}
	}
	if m != nil {
		e, err := h.s.cfg.Keys.Decode(m.Data)
		if err == nil {
			err = h.s.resolve(ctx, &e)
		}
		var c events.Compaction
		if err == nil {
			err = e.Payload(&c)
		}
		if err != nil {
			return fmt.Errorf("jetstream: compaction seq %d: %w", m.Sequence, err)
		}
		window, start = c.Compaction.Window, m.Sequence+1
	}
	err := h.s.scanCheckpoints(ctx, h.session, start, func(cp *runtime.Checkpoint) {
		window = append(window, cp.Append...)
	})
	if err != nil {
		return err
	}
	h.window = window
	h.ids = make(map[string]bool, len(window))
	for _, m := range window {
		h.ids[m.ID] = true
	}
	h.loaded = true
	return nil
}

// Shed drops what the handle caches of the session's window (it is read
// again when next needed) and returns the bytes it still holds: the last
// checkpoint and its used call IDs. A host keeps a parked run's handle
// across attempts with it, so the next attempt needs no new lease and no
// reads to open: the handle's
// fence is still the session's last sequence, and if anyone wrote to the
// session since (a cancellation, another node's activation), its next
// commit is fenced out like any stale writer's.
func (h *RunStore) Shed() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.window, h.ids, h.loaded = nil, nil, false
	h.compaction, h.compactionRead = nil, false
	n := len(h.cpData)
	for _, id := range h.used {
		n += len(id) + 16 // and the string's header
	}
	for _, calls := range [][]runtime.CallRecord{h.calls, h.prevCalls} {
		for _, c := range calls {
			n += len(c.ID) + len(c.Name) + len(c.Args) + len(c.State) + len(c.ResultID) + 80
		}
	}
	return n
}

// Load implements session.SessionStore.
func (h *RunStore) Load(ctx context.Context) ([]model.Message, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.loadWindow(ctx); err != nil {
		return nil, err
	}
	return append([]model.Message(nil), h.window...), nil
}

// History implements session.Auditor: every message of the session, read
// from the log.
func (h *RunStore) History(ctx context.Context) ([]model.Message, error) {
	var out []model.Message
	err := h.s.scanCheckpoints(ctx, h.session, 1, func(cp *runtime.Checkpoint) {
		out = append(out, cp.Append...)
	})
	return out, err
}

// Compact implements session.SessionStore: one fenced event (C15).
func (h *RunStore) Compact(ctx context.Context, c session.Compaction) error {
	for i, m := range c.Window {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("jetstream: compact: window[%d]: %w", i, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.epoch == 0 {
		return fmt.Errorf("jetstream: compact: run %s is completed (read-only handle): %w", h.run, runtime.ErrConflict)
	}
	if err := h.loadWindow(ctx); err != nil {
		return err
	}
	last := ""
	if n := len(h.window); n > 0 {
		last = h.window[n-1].ID
	}
	if last != c.Through {
		return fmt.Errorf("jetstream: compact session %s: window ends with %q, not %q: %w", h.session, last, c.Through, runtime.ErrConflict)
	}
	ev, err := events.New(events.WindowCompacted, h.session, h.run, h.rev, h.epoch, h.s.cfg.Now(), events.Compaction{Compaction: c, RunID: h.run})
	if err != nil {
		return err
	}
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	id := fmt.Sprintf("%s.%s.%d.compact.%d.%s", h.session, h.run, h.epoch, h.rev, hex.EncodeToString(sum[:8]))
	seq, _, err := h.commit(ctx, events.SessionCompactions(h.session), ev, id)
	if err != nil {
		return fmt.Errorf("jetstream: compact session %s: %w", h.session, err)
	}
	h.seq = seq
	h.window = append([]model.Message(nil), c.Window...)
	for _, m := range c.Window {
		h.ids[m.ID] = true
	}
	return nil
}

// WriteVersion is the newest schema version the store may write now
// (Config.Schema within 1 and events.SchemaVersion). Each event is written
// at the least version that reads it (events.VersionOf): below 2, every
// checkpoint lists its calls whole.
func (s *Store) WriteVersion() int {
	if s.cfg.Schema == nil {
		return events.SchemaVersion
	}
	return min(max(s.cfg.Schema(), 1), events.SchemaVersion)
}

// LastCheckpoint decodes the last checkpoint commit on subject, resolving
// a payload kept in the object store, the run's earlier listing of its
// used call IDs and the revisions its calls build on (the checkpoint is
// whole); nil when there is none.
func (s *Store) LastCheckpoint(ctx context.Context, subject string) (*runtime.Checkpoint, error) {
	m, err := s.last(ctx, subject)
	if err != nil || m == nil {
		return nil, err
	}
	p, session, run, err := s.decodeCheckpointOf(ctx, m)
	if err != nil {
		return nil, err
	}
	if p.Checkpoint.UsedCallIDs, _, err = s.usedCallIDs(ctx, m.Sequence, p, session, run); err != nil {
		return nil, err
	}
	if !p.ListsCalls() {
		if p.Checkpoint.Calls, _, _, err = s.journalOf(ctx, session, run, m.Sequence, p); err != nil {
			return nil, err
		}
	}
	return &p.Checkpoint, nil
}

// LastLedger returns the budget totals the last checkpoint commit of a
// run carries (nil: it has none, or no commit).
func (s *Store) LastLedger(ctx context.Context, sessionID, runID string) (*events.Ledger, error) {
	m, err := s.last(ctx, events.RunCheckpoints(sessionID, runID))
	if err != nil || m == nil {
		return nil, err
	}
	p, _, _, err := s.decodeCheckpointOf(ctx, m)
	if err != nil {
		return nil, err
	}
	return p.Ledger, nil
}

// Keys is the keyring of the store's payload codec (Config.Keys), nil when
// it is off: the other readers of the stream (actors, projections, the
// API) decode with it.
func (s *Store) Keys() *events.Keyring { return s.cfg.Keys }
