// Package runindex is the run index read model: every run with its agent,
// owner, parent and status, built from the log by a consumer of run
// creations, completions and ends. It is kept in memory and rebuilt from
// sequence 1 at start (an ordered consumer, nothing left on the server); a
// restart therefore converges on exactly what the log says.
package runindex

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// Entry is one run.
type Entry struct {
	RunID       string             `json:"run_id"`
	SessionID   string             `json:"session_id"`
	Agent       string             `json:"agent"`
	Owner       string             `json:"owner,omitempty"`
	ParentRunID string             `json:"parent_run_id,omitempty"`
	RootRunID   string             `json:"root_run_id"`
	Status      runtime.CallStatus `json:"status"`
	Error       string             `json:"error,omitempty"`
	Created     time.Time          `json:"created"`
	Updated     time.Time          `json:"updated"`
}

// Index is the read model.
type Index struct {
	mu      sync.RWMutex
	runs    map[string]*Entry
	lastSeq uint64
	cc      jetstream.ConsumeContext
}

// Start builds the index from the stream and keeps it current.
func Start(ctx context.Context, js jetstream.JetStream, stream string) (*Index, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("runindex: %w", err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.Prefix + ".sess.*.run.*.created", events.AllCompletions, events.AllEnded},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("runindex: %w", err)
	}
	ix := &Index{runs: map[string]*Entry{}}
	ix.cc, err = cons.Consume(func(m jetstream.Msg) {
		ix.apply(m)
	})
	if err != nil {
		return nil, fmt.Errorf("runindex: %w", err)
	}
	return ix, nil
}

// Close stops following the log.
func (ix *Index) Close() { ix.cc.Stop() }

func (ix *Index) apply(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	e, err := events.Decode(m.Data())
	if err != nil {
		return // an event this build cannot read does not break the index
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if meta.Sequence.Stream <= ix.lastSeq {
		return // idempotent: an event applied once
	}
	ix.lastSeq = meta.Sequence.Stream
	switch {
	case e.Type == events.RunCreated:
		var r events.Run
		if e.Payload(&r) != nil {
			return
		}
		ix.runs[r.RunID] = &Entry{RunID: r.RunID, SessionID: r.SessionID, Agent: r.Agent, Owner: r.Owner, ParentRunID: r.ParentRunID,
			RootRunID: r.RootRunID, Status: runtime.StatusRunning, Created: e.Time, Updated: e.Time}
	case e.Type == events.CheckpointCommitted && strings.HasSuffix(m.Subject(), ".c.done"):
		if en := ix.runs[e.RunID]; en != nil {
			en.Status, en.Updated = runtime.StatusCompleted, e.Time
		}
	case e.Type == events.RunEnded:
		var end events.Ended
		if e.Payload(&end) != nil {
			return
		}
		if en := ix.runs[e.RunID]; en != nil && en.Status.Active() {
			en.Status, en.Error, en.Updated = runtime.CallStatus(end.Status), end.Reason, e.Time
		}
	}
}

// Get returns one run.
func (ix *Index) Get(runID string) (Entry, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.runs[runID]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// List returns the runs of owner ("" for all), newest first; roots only
// unless children is set.
func (ix *Index) List(owner string, children bool) []Entry {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := []Entry{}
	for _, e := range ix.runs {
		if (owner == "" || e.Owner == owner) && (children || e.ParentRunID == "") {
			out = append(out, *e)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].RunID < out[j].RunID
	})
	return out
}

// Counts returns the number of runs by status.
func (ix *Index) Counts() map[runtime.CallStatus]int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := map[runtime.CallStatus]int{}
	for _, e := range ix.runs {
		out[e.Status]++
	}
	return out
}
