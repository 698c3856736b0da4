package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// activeIndex is the active set derived from the log: a run is active from
// its created record until its end, its completed commit (c.done) or its
// end event (.end). Every node keeps it in memory, from the subjects of
// the log alone (no payload is read), so a run costs the active set no
// write of its own: its record and its end are in the log anyway. Once
// the index has read the log as it stood when the node started (ready),
// a run whose record is in the log is one the next sweep finds.
//
// apply is its pure core; follow keeps it current with a stream.
type activeIndex struct {
	mu sync.Mutex
	// sessions holds the active runs, by session: a session's purge
	// marker takes what is left of it (B5 parks 100,000 runs on a node:
	// one small set per session).
	sessions map[string]map[string]struct{}
	// seq is the last stream sequence applied: a message at or below it
	// is one already applied (a consumer that starts over redelivers).
	seq uint64
	// target is the last sequence of the log when following began, what
	// the index must reach to be ready (for readiness to say how far it
	// is).
	target uint64
	// ready is closed once the index has applied the log as it stood
	// when following began: from then on, a run missing from it either
	// ended or was created after seq.
	ready     chan struct{}
	readyOnce sync.Once
	// awaited are runs whose creation's outcome was unknown to the start
	// that wrote it (await): each is woken when its record lands.
	awaited map[string]awaitedRun
}

type awaitedRun struct {
	wake  func()
	since time.Time
}

// Bounds of the creations awaited: only starts whose write's outcome was
// unknown (during an outage) are, and a record lands, if it ever does,
// when the publish buffered across the reconnect is flushed. One that has
// not landed after awaitFor is dropped when room is needed.
const (
	maxAwaited = 100_000
	awaitFor   = time.Hour
)

func newActiveIndex() *activeIndex {
	return &activeIndex{sessions: map[string]map[string]struct{}{}, ready: make(chan struct{}), awaited: map[string]awaitedRun{}}
}

// apply takes the event at stream sequence seq, of subject, into the
// index. Subjects of no run's start or end (and of another layout) change
// nothing but the position.
func (x *activeIndex) apply(seq uint64, subject string) {
	if f := x.applyLocked(seq, subject); f != nil {
		f()
	}
}

// applyLocked is apply under the lock; it returns the wake of an awaited
// creation that landed, to be called without it.
func (x *activeIndex) applyLocked(seq uint64, subject string) func() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if seq <= x.seq {
		return nil
	}
	x.seq = seq
	s, err := events.ParseSubject(subject)
	if err != nil {
		return nil
	}
	switch {
	case s.Kind == events.KindCreated:
		runs := x.sessions[s.SessionID]
		if runs == nil {
			runs = map[string]struct{}{}
			x.sessions[s.SessionID] = runs
		}
		runs[s.RunID] = struct{}{}
		id := identity(s.SessionID, s.RunID)
		if a, ok := x.awaited[id]; ok {
			delete(x.awaited, id)
			return a.wake
		}
	case s.Kind.Final():
		if runs := x.sessions[s.SessionID]; runs != nil {
			delete(runs, s.RunID)
			if len(runs) == 0 {
				delete(x.sessions, s.SessionID)
			}
		}
	case s.Kind == events.KindPurged:
		// Every run of a purged session ended before its marker; a run
		// still here is one whose end the purge removed before the index
		// read it (a node catching up while a session is purged).
		delete(x.sessions, s.SessionID)
	}
	return nil
}

// await calls wake once the record of the run lands in the index, or now
// if it is there: the start that wrote it could not tell whether it was
// stored (a publish buffered across a reconnect is flushed later), and no
// sweep may come for it (a node alone sweeps once, at its start). It
// reports false when too many are awaited already.
func (x *activeIndex) await(sessionID, runID string, now time.Time, wake func()) bool {
	id := identity(sessionID, runID)
	x.mu.Lock()
	_, landed := x.sessions[sessionID][runID]
	if !landed && len(x.awaited) >= maxAwaited {
		for k, a := range x.awaited {
			if now.Sub(a.since) > awaitFor {
				delete(x.awaited, k)
			}
		}
	}
	ok := landed || len(x.awaited) < maxAwaited
	if !landed && ok {
		x.awaited[id] = awaitedRun{wake: wake, since: now}
	}
	x.mu.Unlock()
	if landed {
		wake()
	}
	return ok
}

// position is the last stream sequence applied, and the one the index
// must reach to be ready.
func (x *activeIndex) position() (at, target uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.seq, x.target
}

// setTarget records the sequence the index must reach to be ready.
func (x *activeIndex) setTarget(seq uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.target = seq
}

// caughtUp marks the index ready.
func (x *activeIndex) caughtUp() { x.readyOnce.Do(func() { close(x.ready) }) }

// isReady reports whether the index caught up with the log as it stood
// when following began.
func (x *activeIndex) isReady() bool {
	select {
	case <-x.ready:
		return true
	default:
		return false
	}
}

// reading reports whether the index is still catching up, and how far it
// is, for readiness to say.
func (x *activeIndex) reading() (string, bool) {
	if x.isReady() {
		return "", false
	}
	at, target := x.position()
	return fmt.Sprintf("the active set is still reading the log (at sequence %d of %d)", at, target), true
}

// active lists the active runs.
func (x *activeIndex) active() []activeEntry {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []activeEntry
	for session, runs := range x.sessions {
		for run := range runs {
			out = append(out, activeEntry{session: session, run: run})
		}
	}
	return out
}

// activeFilters are the subjects of runs' starts and ends, and of
// sessions' purge markers.
var activeFilters = []string{events.AllCreated, events.AllCompletions, events.AllEnded, events.AllPurged}

// follow keeps x current with stream until ctx ends. It catches up with
// an ordered consumer of the whole stream, headers only (the server steps
// through an interleaved log much faster unfiltered than with several
// wildcard filters, projections' BenchmarkRebuild), and then follows the
// starts and ends alone, from the position reached (so a node at work
// receives three messages per run, not every commit). A consumer that
// fails is made again from the position, after wait (backing off); the
// ordered consumer itself already starts over after a server restart.
func (x *activeIndex) follow(ctx context.Context, stream jetstream.Stream, logger *slog.Logger, wait func(time.Duration)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := x.consume(ctx, stream)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil: // caught up: follow from here
			backoff = 100 * time.Millisecond
			continue
		}
		at, _ := x.position()
		logger.Debug("actors: active set: follow the log; starting over", "at", at, "in", backoff, "err", err)
		wait(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}

// consume runs one consumer from the position after x's: the catching-up
// one until the index is ready, then the following one. It returns when
// ctx ends or the consumer fails.
func (x *activeIndex) consume(ctx context.Context, stream jetstream.Stream) error {
	cfg := jetstream.OrderedConsumerConfig{HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy}
	var target uint64
	if !x.isReady() {
		info, err := stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream info: %w", err)
		}
		target = info.State.LastSeq
		x.setTarget(target)
		if at, _ := x.position(); info.State.Msgs == 0 || target <= at {
			x.caughtUp()
		}
	}
	if x.isReady() {
		cfg.FilterSubjects = activeFilters
	}
	if at, _ := x.position(); at > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, at+1
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("ordered consumer: %w", err)
	}
	catching := len(cfg.FilterSubjects) == 0
	if info := cons.CachedInfo(); catching && info != nil && info.NumPending == 0 {
		// Nothing left to read from the position on (what lay between it
		// and the target was removed): caught up, and an idle log would
		// deliver nothing to say so.
		x.caughtUp()
		return nil
	}
	it, err := cons.Messages(jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			continue
		}
		x.apply(meta.Sequence.Stream, msg.Subject())
		if catching && (meta.Sequence.Stream >= target || meta.NumPending == 0) {
			// Caught up: follow the starts and ends alone from here.
			x.caughtUp()
			return nil
		}
	}
}
