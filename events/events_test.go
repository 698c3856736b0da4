package events_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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
			// A purged session's log holds its marker alone.
			if n == 0 || (len(revs) == 0 && !strings.HasSuffix(filepath.Dir(f), "-purged")) {
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

// The fast envelope decoder never disagrees with encoding/json: whatever
// it accepts, encoding/json decodes to the same envelope.
func FuzzDecodeFastMatchesEncodingJSON(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, e := range []events.Envelope{
		events.NewRaw(events.CheckpointCommitted, "s-1", "r_2", 3, 4, at, events.CheckpointPayload([]byte(`{"revision":3,"append":[{"id":"a","text":"<&\u2028> \"q\" \\ é","n":-1.5e3,"ok":true,"z":null,"l":[[],{}]}]}`))),
		events.NewRaw(events.WindowCompacted, "s", "", 0, 1, at, json.RawMessage(`{"x":1}`)),
	} {
		body, _, err := events.Encode(e, "id")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	for _, s := range []string{
		`{}`, ` {"type":"lease_acquired" , "version":1,"session_id":"s","epoch":-0,"time":"2026-01-02T03:04:05Z","data":{}} `,
		`{"type":"x","type":"y"}`, `{"Type":"x"}`, `{"version":1.0}`, `{"version":1e2}`, `{"epoch":99999999999999999999}`,
		`{"time":null}`, `{"data":null}`, `{"data":[1]}`, `{"data":{"a":"\ud800"}}`, `{"data":{"a":01}}`, `{"run_id":"r\u0031"}`,
		`{"data":{}} x`, `{"data":{"a":1,}}`, `{"data_ref":{"bucket":"b","key":"k","size":1,"sha256":"x"}}`, `{"time":"2026-13-02T03:04:05Z"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := events.DecodeFast(b)
		if !ok {
			return
		}
		var want events.Envelope
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nfast         %#v\nencoding/json %#v", b, got, want)
		}
	})
}

// Deeply nested payloads: the fast path refuses what encoding/json refuses.
func TestDecodeFastNesting(t *testing.T) {
	for _, levels := range []int{9990, 9998, 9999, 10000, 10001} {
		b := []byte(`{"data":` + strings.Repeat(`{"a":`, levels-1) + `{}` + strings.Repeat(`}`, levels-1) + `}`)
		_, ok := events.DecodeFast(b)
		var e events.Envelope
		err := json.Unmarshal(b, &e)
		if ok && err != nil {
			t.Errorf("payload of %d levels: fast path accepted, encoding/json: %v", levels, err)
		}
	}
}

// What Encode writes takes the fast path (else it would be as slow as
// before, and every test would still pass).
func TestEncodedEventsTakeTheFastPath(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, e := range []events.Envelope{
		events.NewRaw(events.CheckpointCommitted, "s-1", "r_2", 3, 4, at, events.CheckpointPayload([]byte(`{"revision":3,"append":[{"id":"a","text":"\u00e9\n"}]}`))),
		events.NewRaw(events.WindowCompacted, "s", "", 0, 1, at.In(time.FixedZone("x", 3600)), json.RawMessage(`{"x":[1,2.5,-3e-2,true,null]}`)),
	} {
		body, _, err := events.Encode(e, "id")
		if err != nil {
			t.Fatal(err)
		}
		got, ok := events.DecodeFast(body)
		if !ok {
			t.Fatalf("fast path refused %s", body)
		}
		if !got.Time.Equal(e.Time) || string(got.Data) != string(e.Data) || got.RunID != e.RunID || got.Revision != e.Revision {
			t.Fatalf("fast path: %+v, encoded %+v", got, e)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	cp := `{"revision":3,"append":[` + strings.Repeat(`{"id":"a","role":"assistant","text":"some text of a reply, \"quoted\" and long enough"},`, 20) + `{}]}`
	body, _, _ := events.Encode(events.NewRaw(events.CheckpointCommitted, "s-1", "r_2", 3, 4, at, events.CheckpointPayload([]byte(cp))), "id")
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := events.Decode(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var e events.Envelope
			if err := json.Unmarshal(body, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A stream name is one JetStream takes, and no wildcard (the reader's
// permissions name the stream).
func TestCheckStreamName(t *testing.T) {
	for name, ok := range map[string]bool{
		"CAIRN": true, "agent_log-2": true, "": false, "a.b": false, "a*": false, "a>": false, "a/b": false,
		`a\b`: false, "a b": false, "a\tb": false, "a\x00": false, strings.Repeat("a", 256): false, strings.Repeat("a", 255): true,
	} {
		if err := events.CheckStreamName(name); (err == nil) != ok {
			t.Errorf("CheckStreamName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}
