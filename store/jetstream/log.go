package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
)

// LogConfig configures a Log.
type LogConfig struct {
	// Stream is the stream written to; it must exist. Required.
	Stream string
	// Replicas of the stream: above 1, the last message of a subject is
	// read from the leader (a follower may be behind). Zero means 1.
	Replicas int
	// Retries of a publish after a transient error; zero means 5.
	Retries int
	// Backoff is the first retry delay, doubled each time; zero means 20ms.
	Backoff time.Duration
	// Logger receives retry and conflict diagnostics; nil discards them.
	Logger *slog.Logger
	// GroupCommit configures how concurrent writes are grouped into atomic
	// batches (default: adaptive).
	GroupCommit GroupCommit
	// OnBatch, when set, observes every atomic batch (metrics).
	OnBatch func(BatchEvent)
	// WriteFaults, when set, records the outcome of every publish (a
	// single one's every try, a batch's commit): whether the stream
	// stores. Nil records nothing.
	WriteFaults *WriteFaults
}

// Log writes messages to one stream exactly once, each optionally
// fenced on the last sequence of a subject, through a committer: while
// few writes are in flight each is published on its own; when many are,
// they share atomic batches (one flush for all). Every ambiguous answer (a
// lost acknowledgement, a refused batch) is settled by reading the fence
// subject's last message and comparing Msg-Ids, so a caller learns its own
// true outcome and nothing is stored twice. The Store writes its run log
// through one; Cairn's KV buckets (budgets, active runs) through others,
// so that their writes are group-committed too.
type Log struct {
	name     string
	replicas int
	retries  int
	backoff  time.Duration
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   jetstream.Stream
	log      *slog.Logger
	onBatch  func(BatchEvent)
	faults   *WriteFaults
	// publishMsg is w.request (PublishMsg for a message whose headers
	// are set); tests replace it to lose acknowledgements.
	publishMsg func(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error)
	// batchPublish and batchRequest send a batch's messages and its commit
	// (nc.PublishMsg, nc.RequestMsgWithContext); tests replace them.
	batchPublish func(msg *nats.Msg) error
	batchRequest func(ctx context.Context, msg *nats.Msg) (*nats.Msg, error)
	commits      *committer
	// replies receives the answers of multi-message reads (Scan, Lasts).
	replies *replies
	closed  atomic.Bool
}

// Close ends the Log: it removes its reply subscription, and every
// write and read after it fails with ErrClosed. Writes in flight finish.
// The connection is the caller's and stays open. Close is idempotent; ctx
// is unused today (nothing it does waits on the server) and bounds what a
// later Close may have to wait for.
func (w *Log) Close(ctx context.Context) error {
	if w.closed.Swap(true) {
		return nil
	}
	return w.replies.close()
}

// NewLog returns a Log on an existing stream. Unless GroupCommit's
// mode is single, it switches atomic batch publish on for the stream
// (nats-server 2.12+; it changes nothing stored).
func NewLog(ctx context.Context, nc *nats.Conn, cfg LogConfig) (*Log, error) {
	return openLog(ctx, nc, cfg, nil)
}

// openLog is NewLog; active, when set, is the in-flight gauge its
// committer shares with other writers.
func openLog(ctx context.Context, nc *nats.Conn, cfg LogConfig, active *atomic.Int64) (*Log, error) {
	if nc == nil {
		return nil, errors.New("jetstream: NewLog: nil connection")
	}
	if cfg.Stream == "" {
		return nil, errors.New("jetstream: LogConfig.Stream: empty, want the name of an existing stream")
	}
	if cfg.Replicas < 0 || cfg.Retries < 0 || cfg.Backoff < 0 {
		return nil, fmt.Errorf("jetstream: LogConfig: Replicas %d, Retries %d, Backoff %s: must not be negative", cfg.Replicas, cfg.Retries, cfg.Backoff)
	}
	if err := cfg.GroupCommit.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("jetstream: log: stream %s: %w", cfg.Stream, err)
	}
	got := st.CachedInfo().Config
	if got.PersistMode != jetstream.DefaultPersistMode {
		return nil, fmt.Errorf("%w: stream %s: persist_mode is async: acknowledged writes could be lost", ErrStreamMismatch, cfg.Stream)
	}
	if cfg.GroupCommit.Mode != CommitSingle && !got.AllowAtomicPublish {
		got.AllowAtomicPublish = true
		if st, err = js.UpdateStream(ctx, got); err != nil {
			return nil, fmt.Errorf("jetstream: stream %s: enabling atomic batch publish for group commit (needs nats-server 2.12+; GroupCommit.Mode single works without it): %w", cfg.Stream, err)
		}
	}
	return newLog(nc, js, st, cfg, active), nil
}

// newLog fills in defaults; the stream is known to suit. active, when
// set, is the in-flight gauge shared with other writers.
func newLog(nc *nats.Conn, js jetstream.JetStream, st jetstream.Stream, cfg LogConfig, active *atomic.Int64) *Log {
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Retries == 0 {
		cfg.Retries = 5
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 20 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Log{
		name: cfg.Stream, replicas: cfg.Replicas, retries: cfg.Retries, backoff: cfg.Backoff,
		nc: nc, js: js, stream: st, log: log, onBatch: cfg.OnBatch, faults: cfg.WriteFaults,
		batchPublish: nc.PublishMsg, batchRequest: nc.RequestMsgWithContext,
		replies: &replies{nc: nc},
	}
	w.publishMsg = w.request
	w.commits = newCommitter(w, cfg.GroupCommit, active)
	return w
}

// LogOn returns a Log on another stream (one of the node's KV
// buckets, say) with the store's connection, retries and group commit
// configuration, OnBatch hook and WriteFaults, whose committer shares the store's count of writes in
// flight: under SyncAlways every single publish is an fsync of the same
// disk, whichever stream it goes to, so when many runs write at once the
// writes to every stream batch, not only the log's. Like NewLog, it
// switches atomic batch publish on for the stream unless the mode is
// single.
func (s *Store) LogOn(ctx context.Context, stream string) (*Log, error) {
	return openLog(ctx, s.nc, LogConfig{Stream: stream, Replicas: s.cfg.Replicas, Retries: s.cfg.Retries, Backoff: s.cfg.Backoff,
		Logger: s.cfg.Logger, GroupCommit: s.cfg.GroupCommit, OnBatch: s.cfg.OnBatch, WriteFaults: s.cfg.WriteFaults}, s.commits.active)
}

// Write stores msg once, with Msg-Id id, and returns its stream sequence.
// With a fence subject it is stored only if the last message on fence
// (wildcards allowed) has sequence expect (0: no message yet); otherwise
// it fails with an error that wraps runtime.ErrConflict. A retry of the
// same write (same id) after an error that left the outcome unknown
// returns the sequence it was stored at, within the stream's duplicate
// window. msg's headers are kept; Write adds its own.
func (w *Log) Write(ctx context.Context, msg *nats.Msg, id, fence string, expect uint64) (uint64, error) {
	switch {
	case w.closed.Load():
		return 0, fmt.Errorf("jetstream: write %s: %w", id, ErrClosed)
	case msg == nil:
		return 0, errors.New("jetstream: write: nil message")
	case msg.Subject == "":
		return 0, fmt.Errorf("jetstream: write %s: message subject is empty", id)
	case id == "":
		return 0, fmt.Errorf("jetstream: write to %s: id is empty, want a Msg-Id unique to this write", msg.Subject)
	case fence == "" && expect != 0:
		return 0, fmt.Errorf("jetstream: write %s: expect %d without a fence subject", id, expect)
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	settle := func(ctx context.Context, cause error) (uint64, error) {
		last, err := w.last(ctx, fence)
		if err != nil {
			return 0, fmt.Errorf("jetstream: write %s: %v; then: %w", id, cause, err)
		}
		if last != nil && last.Header.Get(jetstream.MsgIDHeader) == id {
			return last.Sequence, nil
		}
		return 0, fmt.Errorf("jetstream: write %s: %s moved on (expected last sequence %d): %w", id, fence, expect, runtime.ErrConflict)
	}
	seq, _, err := w.commits.commit(ctx, msg, id, fence, expect, func() (uint64, error) {
		return w.publish(ctx, msg, id, fence, expect, settle)
	})
	return seq, err
}

// publish is the single-publish path: one publish, retried on transient
// errors; a fenced one has every ambiguous answer settled by settle, which
// reads the log.
func (w *Log) publish(ctx context.Context, msg *nats.Msg, id, fence string, expect uint64, settle func(context.Context, error) (uint64, error)) (uint64, error) {
	// The headers jetstream.WithMsgID and WithExpectLastSequenceForSubject
	// would set, set once: every try sends the same message.
	if msg.Header == nil {
		msg.Header = make(nats.Header, 3)
	}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if fence != "" {
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
		msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, fence)
	}
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, opTimeout)
		ack, err := w.publishMsg(pctx, msg)
		cancel()
		if err == nil {
			w.faults.stored(w.name)
			return ack.Sequence, nil
		}
		// Every try counts: a stream that stores no more is known at the
		// first that fails, not after the retries.
		w.faults.publishFailed(w.name, err, unanswered(ctx, err) && !w.down())
		switch {
		case fence != "" && conflict(err):
			// Either another writer got in, or an earlier try of this very
			// message was stored and its acknowledgement lost (R1 answers a
			// retry with 10071, not duplicate): the log decides. Or neither:
			// a replicated stream's leader acknowledges a fenced write
			// before it forgets that the fence's subject is in process, and
			// refuses a fenced write that arrives in between although the
			// fence holds. Then the log has not moved on, nothing of ours
			// is stored, and the write is tried again.
			if attempt < w.retries && ctx.Err() == nil {
				last, rerr := w.last(ctx, fence)
				if rerr == nil && last != nil && last.Header.Get(jetstream.MsgIDHeader) == id {
					return last.Sequence, nil
				}
				if rerr == nil && (last == nil && expect == 0 || last != nil && last.Sequence == expect) {
					w.log.Debug("jetstream: fenced write refused while its fence held; again", "subject", msg.Subject, "msg_id", id, "attempt", attempt, "err", err)
					if werr := w.sleep(ctx, attempt); werr != nil {
						return 0, fmt.Errorf("jetstream: publish %s: %w (then %v)", id, err, werr)
					}
					continue
				}
			}
			return settle(ctx, err)
		case transient(err) && attempt < w.retries && ctx.Err() == nil && !w.down():
			w.log.Debug("jetstream: publish retry", "subject", msg.Subject, "msg_id", id, "attempt", attempt, "err", err)
			if werr := w.sleep(ctx, attempt); werr != nil {
				return 0, fmt.Errorf("jetstream: publish %s: %w (then %v)", id, err, werr)
			}
			if fence == "" {
				continue // the Msg-Id makes the retry safe: a stored one is answered as a duplicate
			}
			last, rerr := w.last(ctx, fence)
			if rerr != nil {
				continue
			}
			if last != nil && last.Header.Get(jetstream.MsgIDHeader) == id {
				return last.Sequence, nil
			}
			if last != nil && last.Sequence != expect {
				return settle(ctx, err)
			}
		default:
			// Unknown outcome: the caller decides (a run's attempt stops and
			// recovery loads durable state, C8). While the connection is
			// down a retry would only wait out another timeout: the caller
			// waits for the outage to end (Unavailable).
			return 0, fmt.Errorf("jetstream: publish %s: %w", id, err)
		}
	}
}

// Last returns the last message on subject (wildcards allowed), nil when
// there is none, read from the stream leader when replicated.
func (w *Log) Last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	return w.last(ctx, subject)
}

// last returns the last message on subject (wildcards allowed), nil when
// there is none. On a replicated stream it asks the leader: a direct get
// may be answered by a follower that is behind, and every caller of last
// decides something (a fence, a revision, a lost acknowledgement) from it.
// A single-replica stream answers direct gets from its only copy.
func (w *Log) last(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	return w.readOne(ctx, "last of "+subject, map[string]any{"last_by_subj": subject}, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return w.stream.GetLastMsgForSubject(ctx, subject)
	})
}

// bySeq returns the message at seq (nil when there is none), always from
// the stream leader: its callers know the message exists, and a direct get
// may be answered by a copy that does not have it yet (a follower, a
// mirror serving direct gets).
func (w *Log) bySeq(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	req := map[string]any{"seq": seq}
	return w.readOne(ctx, fmt.Sprintf("seq %d", seq), req, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return w.getFromLeader(ctx, req)
	})
}

// readOne reads one message (nil when there is none), retrying transient
// errors while the connection is up: on a replicated stream with request,
// from the leader; on a single replica with direct. Each try is bounded
// by opTimeout.
func (w *Log) readOne(ctx context.Context, what string, request map[string]any, direct func(context.Context) (*jetstream.RawStreamMsg, error)) (*jetstream.RawStreamMsg, error) {
	if w.closed.Load() {
		return nil, fmt.Errorf("jetstream: read %s: %w", what, ErrClosed)
	}
	var err error
	for attempt := 0; attempt <= w.retries; attempt++ {
		var m *jetstream.RawStreamMsg
		if w.replicas > 1 {
			m, err = w.getFromLeader(ctx, request)
		} else {
			rctx, cancel := context.WithTimeout(ctx, opTimeout)
			m, err = direct(rctx)
			cancel()
		}
		if err == nil {
			return m, nil
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, nil
		}
		if !transient(err) || ctx.Err() != nil || w.down() {
			break
		}
		if werr := w.sleep(ctx, attempt); werr != nil {
			break
		}
	}
	return nil, fmt.Errorf("jetstream: read %s: %w", what, err)
}

// getFromLeader asks the stream leader's message-get API for one message.
func (w *Log) getFromLeader(ctx context.Context, request map[string]any) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(request)
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	resp, err := w.nc.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+w.name, req)
	if err != nil {
		return nil, err
	}
	var r struct {
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("message get: %w", err)
	}
	if r.Error != nil {
		if r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, r.Error
	}
	if r.Message == nil {
		return nil, fmt.Errorf("message get: empty answer")
	}
	m := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Sequence, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return nil, fmt.Errorf("message get: headers: %w", err)
		}
	}
	return m, nil
}

// down reports whether the connection is not connected: a request made
// now waits, buffered, until it reconnects or times out, and a retry
// would only wait out another timeout.
func (w *Log) down() bool { return !w.nc.IsConnected() }

func (w *Log) sleep(ctx context.Context, attempt int) error {
	t := time.NewTimer(w.backoff << attempt)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
