// Package clustertest reads a run log after a cluster test and reports
// what a cluster must never do to it: a checkpoint revision appended twice,
// a commit under a lease that was already superseded, a run completed
// twice. It also keeps every commit and lease with its time, for figures
// (how long a moved run took to resume).
package clustertest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// Commit is one checkpoint commit of a run.
type Commit struct {
	SessionID, RunID string
	Revision, Epoch  int64
	Done             bool
	Time             time.Time
	Seq              uint64
}

// Lease is one lease acquisition of a run.
type Lease struct {
	SessionID, RunID string
	Holder           string
	Epoch            int64
	Time             time.Time
	Seq              uint64
}

// Run is what the log says of one run.
type Run struct {
	events.Run
	Commits []Commit
	Leases  []Lease
	// Completions counts its completed commits (c.done); Ended its end
	// events (cancelled or failed).
	Completions, Ended int
}

// Report is the whole log, checked.
type Report struct {
	Runs map[string]*Run // by run ID
	// Violations: each a sentence; none in a correct log.
	Violations []string
	Events     int
}

// Incomplete lists the runs without a completion, sorted.
func (r *Report) Incomplete() []string {
	var out []string
	for id, run := range r.Runs {
		if run.Completions == 0 {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// Check reads every run event of stream from sequence 1 up to the stream's
// last sequence at the time of the call.
func Check(ctx context.Context, js jetstream.JetStream, stream string) (*Report, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("clustertest: stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("clustertest: stream %s: %w", stream, err)
	}
	last := info.State.LastSeq
	rep := &Report{Runs: map[string]*Run{}}
	if last == 0 {
		return rep, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("clustertest: consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("clustertest: consumer: %w", err)
	}
	defer it.Stop()
	run := func(session, id string) *Run {
		r := rep.Runs[id]
		if r == nil {
			r = &Run{}
			r.RunID, r.SessionID = id, session
			rep.Runs[id] = r
		}
		return r
	}
	seen := map[string]bool{} // run/revision
	for {
		msg, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("clustertest: read: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("clustertest: metadata: %w", err)
		}
		seq := meta.Sequence.Stream
		rep.Events++
		ev, err := events.Decode(msg.Data())
		if err != nil {
			rep.Violations = append(rep.Violations, fmt.Sprintf("seq %d on %s does not decode: %v", seq, msg.Subject(), err))
		} else if ev.RunID != "" && strings.Contains(msg.Subject(), ".run.") {
			r := run(ev.SessionID, ev.RunID)
			subject := msg.Subject()
			switch {
			case ev.Type == events.RunCreated:
				var rec events.Run
				if err := ev.Payload(&rec); err == nil {
					r.Run = rec
				}
			case ev.Type == events.LeaseAcquired:
				var l events.Lease
				if err := ev.Payload(&l); err == nil {
					r.Leases = append(r.Leases, Lease{SessionID: ev.SessionID, RunID: ev.RunID, Holder: l.Holder, Epoch: l.Epoch, Time: ev.Time, Seq: seq})
				}
			case ev.Type == events.CheckpointCommitted:
				c := Commit{SessionID: ev.SessionID, RunID: ev.RunID, Revision: ev.Revision, Epoch: ev.Epoch, Done: isDone(subject), Time: ev.Time, Seq: seq}
				key := fmt.Sprintf("%s/%d", ev.RunID, ev.Revision)
				if seen[key] {
					rep.Violations = append(rep.Violations, fmt.Sprintf("run %s: revision %d appended twice (seq %d)", ev.RunID, ev.Revision, seq))
				}
				seen[key] = true
				if n := len(r.Leases); n > 0 && r.Leases[n-1].Epoch != ev.Epoch {
					rep.Violations = append(rep.Violations, fmt.Sprintf("run %s: revision %d committed under epoch %d after epoch %d took the lease (seq %d)", ev.RunID, ev.Revision, ev.Epoch, r.Leases[n-1].Epoch, seq))
				}
				r.Commits = append(r.Commits, c)
				if c.Done {
					r.Completions++
					if r.Completions > 1 {
						rep.Violations = append(rep.Violations, fmt.Sprintf("run %s completed %d times", ev.RunID, r.Completions))
					}
				}
			case ev.Type == events.RunEnded:
				r.Ended++
			}
		}
		if seq >= last {
			return rep, nil
		}
	}
}

// isDone reports whether subject is a run's completed commit.
func isDone(subject string) bool {
	s, err := events.ParseSubject(subject)
	return err == nil && s.Kind == events.KindDone
}
