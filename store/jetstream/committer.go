package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CommitMode selects how checkpoint commits reach the stream.
type CommitMode string

const (
	// CommitAdaptive publishes each commit on its own while few are in
	// flight, and as atomic batches (one flush for many commits) once many
	// runs commit at the same time. The default.
	CommitAdaptive CommitMode = "adaptive"
	// CommitSingle publishes every commit on its own: one fsync each under
	// SyncAlways. Works on any server with JetStream.
	CommitSingle CommitMode = "single"
	// CommitBatch sends every commit through an atomic batch, even a lone
	// one (tests; a batch of one is slower than a single publish).
	CommitBatch CommitMode = "batch"
)

// Server limits of atomic batch publish (nats-server 2.12+).
const (
	serverMaxBatch         = 1000
	serverMaxBatchInflight = 50
	// A batch must be committed within 10 s of its first message; the
	// committer gives up well before, so a late commit never races a retry
	// of the same commits.
	batchTimeout = 5 * time.Second
)

// GroupCommit configures the committer every SaveCheckpoint goes through.
// The defaults were measured on a 2-core machine with SyncAlways (see the
// README's Performance section): a batch costs a few milliseconds of
// staging on top of its one flush, so a batch pays off only once dozens of
// commits are waiting; below that, single publishes are faster.
type GroupCommit struct {
	// Mode: adaptive (""), single or batch.
	Mode CommitMode
	// Threshold is the number of commits in flight at once from which
	// adaptive mode batches; fewer are published one by one, so a lone run
	// sees exactly the single-publish latency. Zero means 32.
	Threshold int
	// MinBatch is the smallest group sent as one batch in adaptive mode;
	// a smaller group waiting is published one by one. Zero means 16.
	MinBatch int
	// MaxBatch is the most commits in one batch, at most 1000 (the
	// server's limit). Zero means 512 (measured with 512 concurrent runs:
	// 256 gave 2.8-2.9x the single-publish rate, 512 gave 3.7-4.7x).
	MaxBatch int
	// MaxInflight is the number of batches in flight at once, at most 50
	// (the server's per-stream limit, shared with any other publisher of
	// the stream). Zero means 2.
	MaxInflight int
	// Linger is how long, in adaptive mode, a group smaller than MinBatch
	// waits for company when no batch is in flight, before it is
	// published one by one. Only writes made while at least Threshold are
	// in flight wait, so a lone writer never does. Without it, on a busy
	// node, a stream written less often than the log (a KV bucket) sent
	// each write on its own the moment its previous batch was answered:
	// measured with 512 runs through the actors, 2 of 3 budget writes were
	// single publishes, each an fsync of the disk every stream shares.
	// Zero means 2ms; negative means no waiting; at most 1s.
	Linger time.Duration
}

func (g *GroupCommit) defaults() error {
	switch g.Mode {
	case "":
		g.Mode = CommitAdaptive
	case CommitAdaptive, CommitSingle, CommitBatch:
	default:
		return fmt.Errorf("jetstream: Config.GroupCommit.Mode: %q, want adaptive, single or batch", g.Mode)
	}
	for _, f := range []struct {
		name     string
		v        *int
		def, max int
	}{
		{"Threshold", &g.Threshold, 32, 1 << 20},
		{"MinBatch", &g.MinBatch, 16, serverMaxBatch},
		{"MaxBatch", &g.MaxBatch, 512, serverMaxBatch},
		{"MaxInflight", &g.MaxInflight, 2, serverMaxBatchInflight},
	} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			return fmt.Errorf("jetstream: Config.GroupCommit.%s: %d, must not be negative", f.name, *f.v)
		case *f.v > f.max:
			return fmt.Errorf("jetstream: Config.GroupCommit.%s: %d, the server allows at most %d", f.name, *f.v, f.max)
		}
	}
	switch {
	case g.Linger == 0:
		g.Linger = 2 * time.Millisecond
	case g.Linger > time.Second:
		return fmt.Errorf("jetstream: Config.GroupCommit.Linger: %s, at most 1s (a waiting group holds its writers)", g.Linger)
	}
	if g.MinBatch > g.MaxBatch {
		return fmt.Errorf("jetstream: Config.GroupCommit.MinBatch: %d is above MaxBatch %d", g.MinBatch, g.MaxBatch)
	}
	return nil
}

// CommitEvent describes one SaveCheckpoint that reached the log (metrics).
type CommitEvent struct {
	// Mode is how it was finally published: "single", "batch", or
	// "fallback" (its batch was refused or its answer lost, and it was
	// published, or settled, on its own).
	Mode     string
	Duration time.Duration
	Err      error
}

// BatchEvent describes one atomic batch (metrics).
type BatchEvent struct {
	// Stream is the stream written: the log, or a KV bucket's stream for
	// a Log made by Store.LogOn.
	Stream   string
	Size     int
	Duration time.Duration
	// Err is why the batch's commits fell back to single publishes; nil
	// when the batch committed.
	Err error
}

// pending is one commit waiting for the committer.
type pending struct {
	msg   *nats.Msg
	id    string
	fence string
	seq   uint64 // the fence's expected last sequence

	done chan struct{}
	// Set before done is closed: the stored sequence, or fallback when the
	// caller must publish (or settle) on its own.
	stored   uint64
	fallback error
}

// committer groups concurrent commits into atomic batches. No goroutine
// lives in it while nothing is waiting: whoever finds a free batch slot
// sends the next batch.
type committer struct {
	w   *Log
	cfg GroupCommit
	// active counts the writes in flight: this committer's, or, for
	// Logs made by Store.LogOn, those of every writer of the store
	// (the disk's fsyncs are shared, so is the decision to batch).
	active  *atomic.Int64
	prefix  string
	batches atomic.Uint64

	mu       sync.Mutex
	queue    []*pending
	inflight int
	// linger is the timer of a small group waiting for company; lingered
	// is set while its expiry dispatches the group whatever its size.
	linger   *time.Timer
	lingered bool
}

func newCommitter(w *Log, cfg GroupCommit, active *atomic.Int64) *committer {
	var b [6]byte
	_, _ = rand.Read(b[:])
	if active == nil {
		active = new(atomic.Int64)
	}
	return &committer{w: w, active: active, cfg: cfg, prefix: hex.EncodeToString(b[:]) + "-"}
}

// commit publishes msg fenced on fence at seq (unfenced when fence is "")
// with Msg-Id id and returns its stream sequence and how it was published. single is the one-by-one
// path with its retries and lost-acknowledgement settling.
func (c *committer) commit(ctx context.Context, msg *nats.Msg, id, fence string, seq uint64, single func() (uint64, error)) (uint64, string, error) {
	n := c.active.Add(1)
	defer c.active.Add(-1)
	if c.cfg.Mode == CommitSingle || (c.cfg.Mode == CommitAdaptive && int(n) < c.cfg.Threshold) {
		stored, err := single()
		return stored, "single", err
	}
	p := &pending{msg: msg, id: id, fence: fence, seq: seq, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	c.dispatchLocked()
	c.mu.Unlock()
	// The caller waits for its batch however long it takes (bounded by
	// batchTimeout): it owns the run's state and must know the outcome.
	<-p.done
	switch p.fallback {
	case nil:
		return p.stored, "batch", nil
	case errSmallGroup: // never batched: a single publish, as documented
		stored, err := single()
		return stored, "single", err
	}
	c.w.log.Debug("jetstream: batch fell back", "msg_id", id, "err", p.fallback)
	stored, err := single()
	return stored, "fallback", err
}

// dispatchLocked starts batches while slots are free. While a batch is in
// flight the next one collects company: it is sent when it is full or when
// the batch in flight is answered, whichever comes first (a batch costs the
// server a few milliseconds of staging whatever its size, so many small
// batches are slower than a few large ones). In adaptive mode a group
// smaller than MinBatch is published one by one instead. Callers hold c.mu.
func (c *committer) dispatchLocked() {
	for c.inflight < c.cfg.MaxInflight && len(c.queue) > 0 {
		if c.inflight > 0 && len(c.queue) < c.cfg.MaxBatch {
			return
		}
		if c.waitForCompanyLocked() {
			return
		}
		batch := c.takeLocked()
		c.inflight++
		go c.send(batch)
	}
}

// waitForCompanyLocked reports whether the queue, a group below MinBatch
// with no batch in flight, waits up to Linger for company (adaptive mode).
// The timer's expiry dispatches it whatever its size. Callers hold c.mu.
func (c *committer) waitForCompanyLocked() bool {
	if c.cfg.Mode != CommitAdaptive || c.cfg.Linger <= 0 || c.lingered || len(c.queue) >= c.cfg.MinBatch {
		return false
	}
	if c.linger == nil {
		c.linger = time.AfterFunc(c.cfg.Linger, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.linger = nil
			c.lingered = true
			c.dispatchLocked()
			c.lingered = false
		})
	}
	return true
}

// takeLocked removes up to MaxBatch commits from the queue, at most one per
// fence subject: the server checks a second fence on the same subject
// within one batch against the batch's cached first answer, so two writers
// of one session in one batch could both pass. Later ones stay queued.
func (c *committer) takeLocked() []*pending {
	batch := make([]*pending, 0, min(len(c.queue), c.cfg.MaxBatch))
	seen := make(map[string]bool, cap(batch))
	rest := c.queue[:0]
	for _, p := range c.queue {
		key := p.fence
		if key == "" { // unfenced: one write per subject keeps a subject's writes in order
			key = p.msg.Subject
		}
		if len(batch) < c.cfg.MaxBatch && !seen[key] {
			seen[key] = true
			batch = append(batch, p)
		} else {
			rest = append(rest, p)
		}
	}
	for i := len(rest); i < len(c.queue); i++ {
		c.queue[i] = nil
	}
	c.queue = rest
	return batch
}

func (c *committer) send(batch []*pending) {
	defer func() {
		c.mu.Lock()
		c.inflight--
		c.dispatchLocked()
		c.mu.Unlock()
	}()
	if c.cfg.Mode == CommitAdaptive && len(batch) < c.cfg.MinBatch {
		for _, p := range batch {
			p.fallback = errSmallGroup
			close(p.done)
		}
		return
	}
	start := time.Now()
	last, err := c.publishBatch(batch)
	if err == nil {
		c.w.faults.stored(c.w.name)
	} else {
		c.w.faults.publishFailed(c.w.name, err, false) // its commits are published one by one next, each try recorded
	}
	if c.w.onBatch != nil {
		c.w.onBatch(BatchEvent{Stream: c.w.name, Size: len(batch), Duration: time.Since(start), Err: err})
	}
	for i, p := range batch {
		if err != nil {
			p.fallback = err
		} else {
			// An atomic batch is stored contiguously, in order.
			p.stored = last - uint64(len(batch)-1-i)
		}
		close(p.done)
	}
}

// errSmallGroup sends a group too small to be worth a batch back to its
// callers, who publish one by one.
var errSmallGroup = errors.New("group below MinBatch")

// batchAck is the server's answer to a batch commit.
type batchAck struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	Seq   uint64              `json:"seq"`
	Batch string              `json:"batch"`
	Count int                 `json:"count"`
}

// publishBatch sends the commits as one atomic batch (the server's
// protocol: Nats-Batch-Id, Nats-Batch-Sequence 1..n, Nats-Batch-Commit on
// the last message, which alone is a request) and returns the sequence of
// its last message. Each message keeps its own fence and Msg-Id. Any error
// means nothing is known for sure: the batch was refused whole, or its
// acknowledgement was lost and it may be stored; each caller then finds
// its own truth on the single path, which reads the log before deciding.
func (c *committer) publishBatch(batch []*pending) (uint64, error) {
	id := c.prefix + strconv.FormatUint(c.batches.Add(1), 36)
	var reply *nats.Msg
	var err error
	for i, p := range batch {
		m := &nats.Msg{Subject: p.msg.Subject, Data: p.msg.Data, Header: make(nats.Header, len(p.msg.Header)+6)}
		for k, v := range p.msg.Header {
			m.Header[k] = v
		}
		m.Header.Set(jetstream.MsgIDHeader, p.id)
		if p.fence != "" {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.seq, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, p.fence)
		}
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(batch)-1 {
			if err = c.w.batchPublish(m); err != nil {
				return 0, fmt.Errorf("batch %s: message %d: %w", id, i+1, err)
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		reply, err = c.w.batchRequest(ctx, m)
		cancel()
	}
	if err != nil {
		return 0, fmt.Errorf("batch %s commit: %w", id, err)
	}
	var ack batchAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return 0, fmt.Errorf("batch %s: undecodable acknowledgement %q: %w", id, reply.Data, err)
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("batch %s: %w", id, ack.Error)
	}
	if ack.Batch != id || ack.Count != len(batch) || ack.Seq < uint64(len(batch)) {
		return 0, fmt.Errorf("batch %s: acknowledgement for batch %q of %d ending at %d, want %d messages", id, ack.Batch, ack.Count, ack.Seq, len(batch))
	}
	return ack.Seq, nil
}
