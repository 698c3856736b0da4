package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-agents/cairn/events"
)

// The command records one log per scenario, each a whole run: every line
// a message of the stream that decodes, in sequence order, the last
// commit of the run its completed commit. (projections/replay re-drives
// the committed recordings to "identical".)
func TestRecordsWholeRuns(t *testing.T) {
	dir := t.TempDir()
	if err := record(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	for _, sc := range scenarios() {
		f, err := os.Open(filepath.Join(dir, sc.Name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := sc
		t.Run(sc.Name, func(t *testing.T) {
			defer f.Close()
			var last events.Subject
			lines := 0
			s := bufio.NewScanner(f)
			s.Buffer(nil, 16<<20)
			for s.Scan() {
				var line struct {
					Subject string            `json:"subject"`
					Headers map[string]string `json:"headers"`
					Body    json.RawMessage   `json:"body"`
				}
				if err := json.Unmarshal(s.Bytes(), &line); err != nil {
					t.Fatal(err)
				}
				lines++
				if _, err := events.Decode(line.Body); err != nil {
					t.Fatalf("line %d: %v", lines, err)
				}
				if line.Headers["Nats-Sequence"] == "" || line.Headers["Nats-Subject"] != line.Subject {
					t.Fatalf("line %d: headers %v lack the message's sequence or subject", lines, line.Headers)
				}
				subj, err := events.ParseSubject(line.Subject)
				if err != nil {
					t.Fatalf("line %d: %v", lines, err)
				}
				if subj.Kind == events.KindStep || subj.Kind == events.KindDone {
					last = subj
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if lines < 3 || last.Kind != events.KindDone {
				t.Fatalf("%d lines, last commit %v: want a whole run", lines, last)
			}
		})
	}
}
