package replay_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
)

// readRecorded reads a recorded log (events/testdata/v*: one JSON line per
// message, its body and headers).
func readRecorded(t testing.TB, path string) []projections.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []projections.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var line struct {
			Body    json.RawMessage   `json:"body"`
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		e, err := events.Decode(line.Body)
		if err != nil {
			t.Fatal(err)
		}
		seq, _ := strconv.ParseUint(line.Headers["Nats-Sequence"], 10, 64)
		out = append(out, projections.Event{Seq: seq, Subject: line.Headers["Nats-Subject"], Envelope: e})
	}
	return out
}

var resultID = regexp.MustCompile(`,"result_id":"[^"]*"`)

// The logs recorded by this build's loop, at every schema version
// (events/testdata/v1, v2, ..., written by go run ./test/recordlogs) read
// and re-drive exactly: every write the log holds is reproduced, under the
// same contract, whichever version wrote it.
func TestRedriveRecordedLogs(t *testing.T) {
	var files []string
	for v := 1; v <= events.SchemaVersion; v++ {
		in, _ := filepath.Glob(fmt.Sprintf("../../events/testdata/v%d/*.jsonl", v))
		if len(in) == 0 {
			t.Fatalf("no recorded logs of version %d", v)
		}
		files = append(files, in...)
	}
	for _, path := range files {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			h, err := replay.FromEvents("r1", readRecorded(t, path))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := replay.Redrive(t.Context(), h, 0, setup(runtimetest.NewHost(t, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Exact() || rep.ContractChanged != "" || rep.Reproduced != rep.Logged || rep.Logged < 2 {
				d := rep.Divergence
				if d != nil {
					t.Fatalf("re-drive diverged at revision %d (%v), %d/%d reproduced, contract change %q:\n logged  %s\n redrive %s\n"+
						"a deliberate change of the loop's commits: record again (go run ./test/recordlogs) and keep the old logs as an earlier build's",
						d.Revision, d.Fields, rep.Reproduced, rep.Logged, rep.ContractChanged, d.Logged, d.Redriven)
				}
				t.Fatalf("re-drive not exact: %d/%d reproduced, contract change %q", rep.Reproduced, rep.Logged, rep.ContractChanged)
			}
		})
	}
}

// The logs recorded by an earlier build (events/testdata/v1-early, before
// the journal named each call's result message) still read
// and re-drive on this build, and the re-drive names exactly what changed
// in the loop's commits since they were recorded.
func TestRedriveEarlierBuildsLogs(t *testing.T) {
	files, _ := filepath.Glob("../../events/testdata/v1-early/*.jsonl")
	if len(files) == 0 {
		t.Fatal("no recorded logs")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			evs := readRecorded(t, path)
			h, err := replay.FromEvents("r1", evs)
			if err != nil {
				t.Fatal(err)
			}
			host := runtimetest.NewHost(t, nil)
			// The recorded contract hash predates capability effect
			// classes (part of today's contract): exact re-drive fails on
			// it alone, accepted it must reproduce everything else.
			strict, err := replay.Redrive(t.Context(), h, 0, setup(host))
			if err != nil {
				t.Fatal(err)
			}
			s := setup(host)
			s.AcceptContractChange = true
			rep, err := replay.Redrive(t.Context(), h, 0, s)
			if err != nil {
				t.Fatal(err)
			}
			// They also predate the journal's result_id (each finished
			// call names its tool result message): the re-drive must stop
			// at the first postresult commit, and differ there by that
			// field alone. A further change of the loop's commits fails
			// here and says where.
			d := rep.Divergence
			if d == nil {
				t.Fatalf("an earlier build's log re-drove exactly (%d/%d): it no longer shows what changed since", rep.Reproduced, rep.Logged)
			}
			if fmt.Sprint(d.Fields) != "[calls]" || resultID.ReplaceAllString(d.Redriven, "") != d.Logged {
				t.Fatalf("re-drive of a recorded log differs beyond result_id at revision %d (%v):\n logged  %s\n redrive %s", d.Revision, d.Fields, d.Logged, d.Redriven)
			}
			if rep.Reproduced < 2 {
				t.Fatalf("only %d writes reproduced before the difference", rep.Reproduced)
			}
			if strict.Exact() != (rep.ContractChanged == "") {
				t.Fatalf("strict re-drive exact=%v, contract change %q", strict.Exact(), rep.ContractChanged)
			}
		})
	}
}

// Whatever the log holds, reading a history and its timeline, states and
// usage never panics.
func FuzzHistory(f *testing.F) {
	files, _ := filepath.Glob("../../events/testdata/v*/*.jsonl")
	for _, path := range files {
		for _, e := range readRecorded(f, path) {
			b, _, err := events.Encode(e.Envelope, "x")
			if err == nil {
				f.Add(b, e.Subject, uint8(e.Revision))
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, subject string, rev uint8) {
		e, err := events.Decode(body)
		if err != nil {
			return
		}
		evs := []projections.Event{{Seq: 1, Subject: subject, Envelope: e}, {Seq: 2, Subject: subject, Envelope: e}}
		h, err := replay.FromEvents(e.RunID, evs)
		if err != nil {
			return
		}
		_ = h.Timeline(int64(rev))
		_ = h.Usage(int64(rev))
		if st, err := h.At(int64(rev)); err == nil {
			_ = replay.DiffStates(st, st)
		}
		_ = replay.DiffRuns(h, h)
	})
}

// The logs under events/testdata/bad-logs are recorded logs with one
// thing broken: a revision's call changes that do not fit the journal
// before it, a revision missing between a response's listing and a
// change, a change that names another listing. Each is refused, not read
// as a shorter or other journal.
func TestHistoryRefusesBadLogs(t *testing.T) {
	if _, err := replay.FromEvents("r1", readRecorded(t, "../../events/testdata/v2/two_run_js_then_complete.jsonl")); err != nil {
		t.Fatalf("the log they were made from: %v", err)
	}
	files, _ := filepath.Glob("../../events/testdata/bad-logs/*.jsonl")
	if len(files) < 3 {
		t.Fatalf("%d bad logs, want 3 or more", len(files))
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if _, err := replay.FromEvents("r1", readRecorded(t, path)); !errors.Is(err, events.ErrMalformed) {
				t.Fatalf("FromEvents = %v, want ErrMalformed", err)
			}
		})
	}
}
