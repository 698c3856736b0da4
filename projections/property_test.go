package projections_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// genLog makes a random but plausible log: runs created (some children of
// others), leases, step and completed commits with calls and results,
// compactions, ends, and a few events no projection understands.
func genLog(rng *rand.Rand, n int) []projections.Event {
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	type run struct {
		id, sess string
		rev      int64
		step     int
		calls    []runtime.CallRecord
		done     bool
	}
	var runs []*run
	var out []projections.Event
	seq := uint64(0)
	add := func(subject string, e events.Envelope, err error) {
		if err != nil {
			panic(err)
		}
		seq += uint64(1 + rng.IntN(3)) // other subjects interleave
		out = append(out, projections.Event{Seq: seq, Subject: subject, Envelope: e})
	}
	for len(out) < n {
		at = at.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		k := rng.IntN(10)
		switch {
		case k == 0 || len(runs) == 0:
			r := &run{id: fmt.Sprintf("r%d", len(runs)), sess: fmt.Sprintf("s%d", rng.IntN(3))}
			p := events.Run{RunID: r.id, SessionID: r.sess, Agent: []string{"planner", "checker"}[rng.IntN(2)], RootRunID: r.id, Owner: "alice"}
			if len(runs) > 0 && rng.IntN(2) == 0 {
				parent := runs[rng.IntN(len(runs))]
				p.ParentRunID, p.ParentSessionID, p.RootRunID = parent.id, parent.sess, parent.id
				if len(parent.calls) > 0 {
					p.ParentCallID = parent.calls[rng.IntN(len(parent.calls))].ID
				}
			}
			runs = append(runs, r)
			e, err := events.New(events.RunCreated, r.sess, r.id, 0, 0, at, p)
			add(events.RunCreatedSubject(r.sess, r.id), e, err)
		case k == 1:
			r := runs[rng.IntN(len(runs))]
			e, err := events.New(events.LeaseAcquired, r.sess, r.id, r.rev, 1, at, events.Lease{Holder: fmt.Sprintf("node%d", rng.IntN(2)), Epoch: int64(rng.IntN(5))})
			add(events.RunLease(r.sess, r.id), e, err)
		case k == 2:
			r := runs[rng.IntN(len(runs))]
			e, err := events.New(events.WindowCompacted, r.sess, r.id, r.rev, 1, at, events.Compaction{RunID: r.id,
				Compaction: session.Compaction{Through: fmt.Sprintf("%s-%d-0", r.id, r.rev), Reason: "prune", Window: []model.Message{model.TextMessage("w", model.RoleUser, "summary")}}})
			add(events.SessionCompactions(r.sess), e, err)
		case k == 3:
			r := runs[rng.IntN(len(runs))]
			e, err := events.New(events.RunEnded, r.sess, r.id, 0, 0, at, events.Ended{Status: []string{"cancelled", "failed"}[rng.IntN(2)], Reason: "r"})
			add(events.RunEndedSubject(r.sess, r.id), e, err)
		case k == 4:
			// Not an event any projection reads: a payload of the wrong
			// shape on a known type.
			r := runs[rng.IntN(len(runs))]
			e := events.NewRaw(events.CheckpointCommitted, r.sess, r.id, 0, 1, at, json.RawMessage(`{"checkpoint":7}`))
			add(events.CheckpointSubject(r.sess, r.id, false), e, nil)
		default:
			r := runs[rng.IntN(len(runs))]
			if r.done {
				continue
			}
			r.rev++
			key := r.id
			cp := runtime.Checkpoint{Version: 1, Revision: r.rev, RunKey: key, Step: r.step, Phase: runtime.PhaseModel}
			pending := -1
			for i, c := range r.calls {
				if !c.State.Terminal() {
					pending = i
					break
				}
			}
			switch {
			case r.rev == 1:
				cp.Append = []model.Message{model.TextMessage(fmt.Sprintf("%s-1-0", key), model.RoleUser, "task")}
			case pending < 0:
				r.step++
				cp.Step, cp.Phase = r.step, runtime.PhaseCalls
				cp.ResponseID = fmt.Sprintf("%s-%d-0", key, r.rev)
				cp.Usage = &model.Usage{InputTokens: int64(rng.IntN(5000)), OutputTokens: int64(rng.IntN(500))}
				msg := model.Message{ID: cp.ResponseID, Role: model.RoleAssistant}
				r.calls = nil
				for i := 0; i < 1+rng.IntN(3); i++ {
					id := fmt.Sprintf("%s-c%d-%d", r.id, r.step, i)
					name := []string{"run_js", "spawn_checker", "complete"}[rng.IntN(3)]
					r.calls = append(r.calls, runtime.CallRecord{ID: id, Name: name, Args: "{}", State: runtime.CallPending})
					msg.Parts = append(msg.Parts, model.Call(id, name, "{}"))
				}
				r.calls[0].State = runtime.CallDispatching
				cp.Append = []model.Message{msg}
			default:
				c := &r.calls[pending]
				c.State = []runtime.CallState{runtime.CallDone, runtime.CallError, runtime.CallUnknown}[rng.IntN(3)]
				c.ResultID = fmt.Sprintf("%s-%d-0", key, r.rev)
				cp.Append = []model.Message{{ID: c.ResultID, Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult,
					ToolResult: &model.ToolResult{CallID: c.ID, Name: c.Name, Content: fmt.Sprintf("result %d", rng.IntN(100)), IsError: c.State != runtime.CallDone}}}}}
				cp.Phase = runtime.PhaseCalls
				if c.Name == "complete" && c.State == runtime.CallDone {
					cp.Reply, cp.Phase, r.done = &runtime.Reply{Type: runtime.ReplyOutput, Output: json.RawMessage(`{"answer":"x"}`)}, runtime.PhaseCompleted, true
				} else if pending+1 < len(r.calls) {
					r.calls[pending+1].State = runtime.CallDispatching
				}
			}
			cp.Step, cp.ResponseID = r.step, fmt.Sprintf("%s-%d-0", key, func() int64 {
				for j := r.rev; j > 0; j-- {
					if cp.Phase != runtime.PhaseModel {
						return j
					}
				}
				return r.rev
			}())
			cp.Calls = append([]runtime.CallRecord(nil), r.calls...)
			b, _ := json.Marshal(cp)
			e := events.NewRaw(events.CheckpointCommitted, r.sess, r.id, r.rev, 1, at, events.CheckpointPayload(b))
			add(events.CheckpointSubject(r.sess, r.id, cp.Reply != nil), e, nil)
		}
	}
	return out
}

func models() []func() projections.Projection {
	return []func() projections.Projection{
		func() projections.Projection { return projections.NewRuns() },
		func() projections.Projection { return projections.NewCallTree() },
		func() projections.Projection { return projections.NewUsage() },
		func() projections.Projection { return projections.NewTranscripts("") },
	}
}

func rebuild(t *testing.T, p projections.Projection, log []projections.Event) []byte {
	t.Helper()
	f := projections.NewFollower(p)
	for _, e := range log {
		if _, err := f.Offer(e); err != nil {
			t.Fatal(err)
		}
	}
	b, err := f.Save()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// For random logs, a projection that followed the log incrementally
// (through restarts that lose unsaved work and redeliveries of events it
// already applied) ends in exactly the state of a rebuild from sequence 1.
func TestIncrementalEqualsRebuild(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for round := 0; round < 40; round++ {
		log := genLog(rng, 50+rng.IntN(300))
		for _, mk := range models() {
			want := rebuild(t, mk(), log)
			f := projections.NewFollower(mk())
			saved, _ := projections.NewFollower(mk()).Save()
			savedAt := 0 // events offered when saved
			for i := 0; i < len(log); {
				switch rng.IntN(100) {
				case 0, 1, 2, 3, 4, 5, 6, 7, 8, 9: // save
					b, err := f.Save()
					if err != nil {
						t.Fatal(err)
					}
					saved, savedAt = b, i
				case 10: // crash: restart from the last save; the log is read again from at or before it
					f = projections.NewFollower(mk())
					if err := f.Load(saved); err != nil {
						t.Fatal(err)
					}
					i = max(0, savedAt-rng.IntN(5))
				default:
					if _, err := f.Offer(log[i]); err != nil {
						t.Fatal(err)
					}
					i++
				}
			}
			got, err := f.Save()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				k := 0
				for k < len(got) && k < len(want) && got[k] == want[k] {
					k++
				}
				lo := max(0, k-300)
				t.Fatalf("seed %d round %d %s: incremental state differs from the rebuild at byte %d\n got ...%.500s\nwant ...%.500s", seed, round, mk().Name(), k, got[lo:], want[lo:])
			}
		}
	}
}
