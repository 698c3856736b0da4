package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/cairn-agents/cairn/runtime/model"
)

// Change is one difference between two states or two runs.
type Change struct {
	// Revision is the revision compared (for two runs; 0 for two states).
	Revision int64 `json:"revision,omitempty"`
	// What differs: a checkpoint field, "transcript[i]", "window", or
	// "revision" when only one side has it.
	What string `json:"what"`
	A    string `json:"a,omitempty"`
	B    string `json:"b,omitempty"`
}

// DiffStates compares two reconstructed states (two revisions of a run, or
// of two runs): the checkpoint field by field, then the transcripts
// message by message.
func DiffStates(a, b *State) []Change {
	var out []Change
	ab, _ := json.Marshal(strip(a))
	bb, _ := json.Marshal(strip(b))
	out = append(out, fieldChanges(0, ab, bb)...)
	n := max(len(a.Transcript), len(b.Transcript))
	for i := 0; i < n; i++ {
		var x, y string
		if i < len(a.Transcript) {
			x = describe(a.Transcript[i])
		}
		if i < len(b.Transcript) {
			y = describe(b.Transcript[i])
		}
		if x != y {
			out = append(out, Change{What: fmt.Sprintf("transcript[%d]", i), A: x, B: y})
		}
	}
	if len(a.Window) != len(b.Window) {
		out = append(out, Change{What: "window", A: fmt.Sprintf("%d messages", len(a.Window)), B: fmt.Sprintf("%d messages", len(b.Window))})
	}
	return out
}

func strip(s *State) any {
	cp := *s.Checkpoint
	cp.Append = nil
	return cp
}

func describe(m model.Message) string {
	var parts []string
	for _, p := range m.Parts {
		switch {
		case p.ToolCall != nil:
			parts = append(parts, fmt.Sprintf("call %s %s %s", p.ToolCall.ID, p.ToolCall.Name, short(p.ToolCall.Args)))
		case p.ToolResult != nil:
			parts = append(parts, fmt.Sprintf("result %s %s", p.ToolResult.CallID, short(p.ToolResult.Content)))
		default:
			parts = append(parts, short(p.Text))
		}
	}
	return string(m.Role) + ": " + strings.Join(parts, " | ")
}

func fieldChanges(rev int64, a, b []byte) []Change {
	var ma, mb map[string]json.RawMessage
	_ = json.Unmarshal(a, &ma)
	_ = json.Unmarshal(b, &mb)
	var out []Change
	for _, k := range sortedKeys(ma, mb) {
		if !bytes.Equal(ma[k], mb[k]) {
			out = append(out, Change{Revision: rev, What: k, A: short(string(ma[k])), B: short(string(mb[k]))})
		}
	}
	return out
}

// DiffRuns compares two runs revision by revision (a fork with its origin,
// or a run with its re-run): each run's key is replaced by a placeholder
// first, so message IDs derived from it compare equal.
func DiffRuns(a, b *History) []Change {
	var out []Change
	n := max(len(a.Commits), len(b.Commits))
	for i := 0; i < n; i++ {
		switch {
		case i >= len(a.Commits):
			out = append(out, Change{Revision: b.Commits[i].Checkpoint.Revision, What: "revision", B: "only in " + b.RunID})
		case i >= len(b.Commits):
			out = append(out, Change{Revision: a.Commits[i].Checkpoint.Revision, What: "revision", A: "only in " + a.RunID})
		default:
			ca, cb := a.Commits[i].Checkpoint, b.Commits[i].Checkpoint
			ab, _ := json.Marshal(ca)
			bb, _ := json.Marshal(cb)
			if ca.RunKey != "" && cb.RunKey != "" {
				ab = bytes.ReplaceAll(ab, []byte(ca.RunKey), []byte("<key>"))
				bb = bytes.ReplaceAll(bb, []byte(cb.RunKey), []byte("<key>"))
			}
			out = append(out, fieldChanges(ca.Revision, ab, bb)...)
		}
	}
	return out
}

// PrintChanges writes changes readably; no changes prints "identical".
func PrintChanges(w io.Writer, changes []Change) {
	if len(changes) == 0 {
		fmt.Fprintln(w, "identical")
		return
	}
	for _, c := range changes {
		rev := ""
		if c.Revision > 0 {
			rev = fmt.Sprintf("r%d ", c.Revision)
		}
		fmt.Fprintf(w, "%s%s\n  - %s\n  + %s\n", rev, c.What, c.A, c.B)
	}
}
