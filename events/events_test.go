package events_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
)

// Every recorded log of every schema version still decodes, and replaying
// its checkpoint commits gives each run revisions 1, 2, 3... with no
// message appended twice.
func TestRecordedLogsDecode(t *testing.T) {
	files, _ := filepath.Glob("testdata/v*/*.jsonl")
	if len(files) == 0 {
		t.Fatal("no recorded logs")
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			revs := map[string]int64{}
			seen := map[string]bool{}
			sc := bufio.NewScanner(fh)
			sc.Buffer(nil, 16<<20)
			n := 0
			for sc.Scan() {
				var line struct {
					Subject string            `json:"subject"`
					Headers map[string]string `json:"headers"`
					Body    json.RawMessage   `json:"body"`
				}
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatal(err)
				}
				e, err := events.Decode(line.Body)
				if err != nil {
					t.Fatalf("line %d: %v", n, err)
				}
				if line.Headers[events.CEType] != string(e.Type) || line.Headers[events.CESpecVersion] != "1.0" || line.Headers[events.HeaderVersion] != fmt.Sprint(e.Version) {
					t.Fatalf("line %d: headers %v do not match the body", n, line.Headers)
				}
				if e.Type == events.CheckpointCommitted {
					var p events.Checkpoint
					if err := e.Payload(&p); err != nil {
						t.Fatal(err)
					}
					if p.Checkpoint.Revision != revs[e.RunID]+1 || p.Checkpoint.Revision != e.Revision {
						t.Fatalf("line %d: revision %d after %d", n, p.Checkpoint.Revision, revs[e.RunID])
					}
					revs[e.RunID] = p.Checkpoint.Revision
					for _, m := range p.Checkpoint.Append {
						if seen[m.ID] {
							t.Fatalf("message %s appended twice", m.ID)
						}
						seen[m.ID] = true
					}
					if line.Subject != events.CheckpointSubject(e.SessionID, e.RunID, p.Checkpoint.Reply != nil) {
						t.Fatalf("checkpoint on subject %s", line.Subject)
					}
				}
				n++
			}
			if n == 0 || len(revs) == 0 {
				t.Fatal("empty log")
			}
		})
	}
}

// The bad-* files must fail to decode, each with its sentinel.
func TestBadEventsAreRejected(t *testing.T) {
	want := map[string]error{
		"newer-version.json": events.ErrUnknownVersion,
		"no-session.json":    events.ErrMalformed,
		"unknown-type.json":  events.ErrUnknownType,
		"both-payloads.json": events.ErrMalformed,
		"not-json.json":      events.ErrMalformed,
	}
	for name, sentinel := range want {
		b, err := os.ReadFile(filepath.Join("testdata", "bad", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := events.Decode(b); !errors.Is(err, sentinel) {
			t.Fatalf("%s: err = %v, want %v", name, err, sentinel)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC)
	e, err := events.New(events.LeaseAcquired, "s1", "r1", 0, 7, at, events.Lease{Holder: "node-a", Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	body, hdr, err := events.Encode(e, "s1.r1.lease.7")
	if err != nil {
		t.Fatal(err)
	}
	if hdr[events.CEID] != "s1.r1.lease.7" || hdr[events.CESource] != "cairn/s1/r1" || hdr[events.HeaderEpoch] != "7" || hdr[events.CETime] != "2026-11-30T01:02:03.000000004Z" {
		t.Fatalf("headers = %v", hdr)
	}
	got, err := events.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	var l events.Lease
	if err := got.Payload(&l); err != nil || l.Holder != "node-a" || got.Epoch != 7 || !got.Time.Equal(at) {
		t.Fatalf("decoded %+v %+v (%v)", got, l, err)
	}
	if _, _, err := events.Encode(events.Envelope{Type: "nope"}, "x"); !errors.Is(err, events.ErrUnknownType) {
		t.Fatalf("encode of an unknown type: %v", err)
	}
}

func TestSubjectsAndIDs(t *testing.T) {
	if got := events.CheckpointSubject("s", "r", true); got != "cairn.sess.s.run.r.c.done" {
		t.Fatal(got)
	}
	if !strings.HasSuffix(events.SessionAll("s"), ".>") {
		t.Fatal(events.SessionAll("s"))
	}
	for _, bad := range []string{"", "a.b", "*", ">", "a b", strings.Repeat("x", 129)} {
		if events.ValidID(bad) == nil {
			t.Fatalf("ValidID(%q) accepted", bad)
		}
	}
	if events.ValidID("run_01-A") != nil {
		t.Fatal("a valid ID was refused")
	}
}

func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob("testdata/bad/*.json")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Decode(b)
		if err == nil {
			var v map[string]any
			_ = e.Payload(&v)
		}
	})
}

// The hand-written envelope encodes exactly what encoding/json would.
func TestEncodeMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range []events.Envelope{
		events.NewRaw(events.CheckpointCommitted, "s-1", "r_2", 3, 4, at, events.CheckpointPayload([]byte(`{"revision":3,"append":[{"id":"a","text":"<&\u2028>"}]}`))),
		events.NewRaw(events.WindowCompacted, "s", "", 0, 1, at, json.RawMessage(`{"x":1}`)),
		{Type: events.LeaseAcquired, Version: 1, SessionID: "s", RunID: "r", Epoch: 2, Time: at, DataRef: &events.ObjectRef{Bucket: "b", Key: "k", Size: 9, SHA256: "ab"}},
	} {
		body, _, err := events.Encode(e, "id")
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		ref, _ := json.Marshal(e)
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("invalid JSON %s: %v", body, err)
		}
		_ = json.Unmarshal(ref, &want)
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if string(gb) != string(wb) {
			t.Fatalf("Encode = %s\nencoding/json = %s", body, ref)
		}
	}
	if _, _, err := events.Encode(events.NewRaw(events.LeaseAcquired, "a.b", "r", 0, 1, at, json.RawMessage(`{}`)), "id"); !errors.Is(err, events.ErrMalformed) {
		t.Fatalf("a session ID that is not a subject token: %v", err)
	}
}
