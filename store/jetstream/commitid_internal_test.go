package jetstream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"testing"

	"github.com/cairn-agents/cairn/events"
)

// A commit's Msg-Id is what the server deduplicates a retry on, so it
// must not change from one build to the next: a retry written by a build
// after a rolling restart must name the same commit. commitID gives what
// the first builds wrote with fmt.
func TestCommitIDIsStable(t *testing.T) {
	old := func(session, run string, epoch, rev int64, b []byte, l *events.Ledger) string {
		hash := sha256.New()
		hash.Write(b)
		if l != nil {
			fmt.Fprintf(hash, "ledger %d %d %d", l.Steps, l.InputTokens, l.OutputTokens)
		}
		var sum [sha256.Size]byte
		hash.Sum(sum[:0])
		return fmt.Sprintf("%s.%s.%d.%d.%s", session, run, epoch, rev, hex.EncodeToString(sum[:8]))
	}
	cp := []byte(`{"revision":3,"calls":[]}`)
	for _, l := range []*events.Ledger{nil, {}, {Steps: 2, InputTokens: 120, OutputTokens: 40},
		{Steps: -1, InputTokens: -5, OutputTokens: 0}, {Steps: math.MaxInt, InputTokens: math.MaxInt64, OutputTokens: math.MinInt64}} {
		for _, er := range [][2]int64{{1, 1}, {9, 12345}, {math.MaxInt64, math.MaxInt64}} {
			got, want := commitID("s1f2", "r9a8", er[0], er[1], cp, l), old("s1f2", "r9a8", er[0], er[1], cp, l)
			if got != want {
				t.Errorf("ledger %+v epoch %d rev %d: %s, want %s", l, er[0], er[1], got, want)
			}
		}
	}
}
