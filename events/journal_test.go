package events_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

func journal(states ...runtime.CallState) []runtime.CallRecord {
	out := make([]runtime.CallRecord, len(states))
	for i, s := range states {
		out[i] = runtime.CallRecord{ID: "c" + string(rune('a'+i)), Name: "run_js", Args: `{"code":"1"}`, State: s}
	}
	return out
}

func TestCallDelta(t *testing.T) {
	pending, dispatching, done := runtime.CallPending, runtime.CallDispatching, runtime.CallDone
	resulted := journal(done, dispatching, pending)
	resulted[0].ResultID = "k-3-0"
	otherArgs := journal(pending, pending, pending)
	otherArgs[2].Args = `{"code":"2"}`
	otherName := journal(pending, pending, pending)
	otherName[1].Name = "complete"
	for _, tc := range []struct {
		name      string
		prev, cur []runtime.CallRecord
		at        []int
		ok        bool
	}{
		{"one dispatched", journal(pending, pending, pending), journal(pending, dispatching, pending), []int{1}, true},
		{"a result and the next dispatched", journal(dispatching, pending, pending), resulted, []int{0, 1}, true},
		{"nothing changed", journal(done, pending), journal(done, pending), nil, true},
		{"another length", journal(pending, pending), journal(pending, pending, pending), nil, false},
		{"other arguments", journal(pending, pending, pending), otherArgs, nil, false},
		{"another name", journal(pending, pending, pending), otherName, nil, false},
		{"no calls", nil, nil, nil, false},
		{"no calls before", nil, journal(pending), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed, at, ok := events.CallDelta(tc.prev, tc.cur)
			if ok != tc.ok || !reflect.DeepEqual(at, tc.at) {
				t.Fatalf("CallDelta = at %v, ok %v; want %v, %v", at, ok, tc.at, tc.ok)
			}
			if !ok {
				return
			}
			for _, c := range changed {
				if c.Args != "" {
					t.Fatalf("changed call %s carries its arguments", c.ID)
				}
			}
			got, err := events.ApplyCalls(tc.prev, changed, at)
			if err != nil || !reflect.DeepEqual(got, tc.cur) {
				t.Fatalf("ApplyCalls = %+v, %v; want %+v", got, err, tc.cur)
			}
		})
	}
}

func TestApplyCallsRefusesWhatDoesNotFit(t *testing.T) {
	prev := journal(runtime.CallPending, runtime.CallPending)
	one := func(id string) []runtime.CallRecord {
		return []runtime.CallRecord{{ID: id, Name: "run_js", State: runtime.CallDone}}
	}
	for _, tc := range []struct {
		name    string
		changed []runtime.CallRecord
		at      []int
	}{
		{"index out of range", one("ca"), []int{2}},
		{"negative index", one("ca"), []int{-1}},
		{"indices out of order", append(one("cb"), one("ca")...), []int{1, 0}},
		{"an index twice", append(one("ca"), one("ca")...), []int{0, 0}},
		{"another call at the index", one("cb"), []int{0}},
		{"fewer indices than calls", one("ca"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := events.ApplyCalls(prev, tc.changed, tc.at); !errors.Is(err, events.ErrMalformed) {
				t.Fatalf("ApplyCalls = %v, want ErrMalformed", err)
			}
		})
	}
}

// payload encodes a checkpoint at rev on bases as a commit's payload.
func payload(t *testing.T, cp runtime.Checkpoint, on events.Bases) *events.Checkpoint {
	t.Helper()
	b, err := json.Marshal(&cp)
	if err != nil {
		t.Fatal(err)
	}
	var p events.Checkpoint
	if err := json.Unmarshal(events.CheckpointPayloadWith(b, on), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// A Folder makes whole checkpoints of a run's events in order: used call
// IDs on their listing, calls on the revision before; a checkpoint whose
// base it has not seen is ErrNoBase, and another run's do not mix in.
func TestFolder(t *testing.T) {
	pending, dispatching, done := runtime.CallPending, runtime.CallDispatching, runtime.CallDone
	at := func(rev int64, calls []runtime.CallRecord, used ...string) runtime.Checkpoint {
		return runtime.Checkpoint{Revision: rev, Calls: calls, UsedCallIDs: used}
	}
	f := events.NewFolder()
	steps := []struct {
		run  string
		p    *events.Checkpoint
		want runtime.Checkpoint
	}{
		{"r", payload(t, at(1, journal(pending, pending), "ca", "cb"), events.Bases{}), at(1, journal(pending, pending), "ca", "cb")},
		{"other", payload(t, at(1, journal(pending), "x"), events.Bases{}), at(1, journal(pending), "x")},
		{"r", payload(t, at(2, []runtime.CallRecord{{ID: "ca", Name: "run_js", State: dispatching}}),
			events.Bases{UsedSeq: 1, UsedRev: 1, CallsSeq: 1, CallsRev: 1, CallsAt: []int{0}}), at(2, journal(dispatching, pending), "ca", "cb")},
		{"r", payload(t, at(3, []runtime.CallRecord{{ID: "ca", Name: "run_js", State: done}, {ID: "cb", Name: "run_js", State: dispatching}}, "cc"),
			events.Bases{UsedSeq: 1, UsedRev: 1, CallsSeq: 1, CallsRev: 1, CallsAt: []int{0, 1}}), at(3, journal(done, dispatching), "ca", "cb", "cc")},
		{"r", payload(t, at(4, nil), events.Bases{UsedSeq: 1, UsedRev: 1, CallsSeq: 1, CallsRev: 1}), at(4, journal(done, dispatching), "ca", "cb")},
	}
	for _, st := range steps {
		got, err := f.Whole(st.run, st.p)
		if err != nil {
			t.Fatalf("run %s revision %d: %v", st.run, st.p.Checkpoint.Revision, err)
		}
		if !reflect.DeepEqual(*got, st.want) {
			t.Fatalf("run %s revision %d:\n got %+v\nwant %+v", st.run, st.p.Checkpoint.Revision, *got, st.want)
		}
	}
	// A revision after a gap, and one whose used IDs build on a revision
	// never seen.
	gap := payload(t, at(6, nil), events.Bases{CallsRev: 1})
	if _, err := f.Whole("r", gap); !errors.Is(err, events.ErrNoBase) {
		t.Fatalf("revision 6 after 4: %v, want ErrNoBase", err)
	}
	otherListing := payload(t, at(5, nil), events.Bases{CallsRev: 2})
	if _, err := f.Whole("r", otherListing); !errors.Is(err, events.ErrMalformed) {
		t.Fatalf("calls on revision 2, which listed none: %v, want ErrMalformed", err)
	}
	unseen := payload(t, at(5, nil, "cd"), events.Bases{UsedSeq: 3, UsedRev: 3})
	if _, err := f.Whole("r", unseen); !errors.Is(err, events.ErrNoBase) {
		t.Fatalf("used IDs on revision 3, never a listing: %v, want ErrNoBase", err)
	}
	f.Forget("r")
	if _, err := f.Whole("r", steps[2].p); !errors.Is(err, events.ErrNoBase) {
		t.Fatalf("after Forget: %v, want ErrNoBase", err)
	}
}

func TestDecodeCheckpointChecksBases(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"calls on a later revision", `{"checkpoint":{"revision":3},"calls_base_rev":3}`},
		{"calls on a negative revision", `{"checkpoint":{"revision":3},"calls_base_rev":-1}`},
		{"changes without a base", `{"checkpoint":{"revision":3,"calls":[{"id":"a","name":"n","state":"done"}]},"calls_at":[0]}`},
		{"more calls than indices", `{"checkpoint":{"revision":3,"calls":[{"id":"a","name":"n","state":"done"}]},"calls_base_rev":1}`},
		{"used IDs on a later revision", `{"checkpoint":{"revision":3},"used_call_ids_base":9,"used_call_ids_base_rev":4}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := events.Envelope{Type: events.CheckpointCommitted, Version: events.SchemaVersion, SessionID: "s", RunID: "r", Data: json.RawMessage(tc.data)}
			if _, err := events.DecodeCheckpoint(e); !errors.Is(err, events.ErrMalformed) {
				t.Fatalf("DecodeCheckpoint = %v, want ErrMalformed", err)
			}
		})
	}
}

// FuzzFolder: a payload read from the log, whatever its bytes, folds into
// a checkpoint or an error, never a panic, on a run that has a listing.
func FuzzFolder(f *testing.F) {
	f.Add(`{"checkpoint":{"revision":2,"calls":[{"id":"ca","name":"run_js","state":"done"}]},"calls_base_rev":1,"calls_at":[0]}`)
	f.Add(`{"checkpoint":{"revision":2,"used_call_ids":["x"]},"used_call_ids_base":1,"used_call_ids_base_rev":1,"calls_base_rev":1}`)
	f.Add(`{"checkpoint":{"revision":2,"calls":[{"id":"cb","name":"run_js","state":"done"}]},"calls_base_rev":1,"calls_at":[5]}`)
	f.Fuzz(func(t *testing.T, data string) {
		first := payload(t, runtime.Checkpoint{Revision: 1, Calls: journal(runtime.CallPending, runtime.CallPending), UsedCallIDs: []string{"ca", "cb"}}, events.Bases{})
		fo := events.NewFolder()
		if _, err := fo.Whole("r", first); err != nil {
			t.Fatal(err)
		}
		e := events.Envelope{Type: events.CheckpointCommitted, Version: events.SchemaVersion, SessionID: "s", RunID: "r", Data: json.RawMessage(data)}
		p, err := events.DecodeCheckpoint(e)
		if err != nil {
			return
		}
		cp, err := fo.Whole("r", p)
		if err == nil && !p.ListsCalls() && len(cp.Calls) != 2 {
			t.Fatalf("a change of a journal of 2 calls made %d: %s", len(cp.Calls), strings.TrimSpace(data))
		}
	})
}

// A commit built with NewCommit carries the version its listing needs, so
// a delta reads as a delta after a round trip through the codec (a version
// 1 envelope around one would read as the whole journal).
func TestNewCommitVersions(t *testing.T) {
	cp := runtime.Checkpoint{Revision: 4, Calls: []runtime.CallRecord{{ID: "b", State: runtime.CallDone}}}
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		on      events.Bases
		version int
	}{{events.Bases{}, 1}, {events.Bases{CallsSeq: 7, CallsRev: 2, CallsAt: []int{1}}, 2}} {
		e := events.NewCommit("s", "r", 4, 1, at, b, tc.on)
		body, _, err := events.Encode(e, "id")
		if err != nil {
			t.Fatal(err)
		}
		back, err := events.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		p, err := events.DecodeCheckpoint(back)
		if err != nil || back.Version != tc.version || p.CallsBaseRev != tc.on.CallsRev || len(p.CallsAt) != len(tc.on.CallsAt) {
			t.Fatalf("%+v: version %d, %+v, %v; want version %d with its listing", tc.on, back.Version, p, err, tc.version)
		}
	}
}
