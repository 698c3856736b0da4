package jetstream

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// A fault holds per stream until a write to that stream is stored; the
// silence that follows a store's write error (publishes left unanswered)
// renews it and keeps its cause. Before, an unanswered publish replaced
// the embedded server's ENOSPC with "no answer" (seen once in
// TestReadyzFollowsAFullDisk, whose reason then named no full disk).
func TestWriteFaultsKeepTheirCause(t *testing.T) {
	var f WriteFaults
	full := fmt.Errorf("write 1.blk: %w", syscall.ENOSPC)
	f.failed("CAIRN", full)
	first := f.Last()
	f.publishFailed("CAIRN", context.DeadlineExceeded, true)
	if g := f.Last(); g.Stream != "CAIRN" || !errors.Is(g, syscall.ENOSPC) || g.Seq <= first.Seq {
		t.Fatalf("after an unanswered publish: %v (seq %d), want CAIRN's ENOSPC renewed past seq %d", g, g.Seq, first.Seq)
	}
	f.publishFailed("KV_b", context.DeadlineExceeded, true)
	if g := f.Last(); g.Stream != "KV_b" || !errors.Is(g, context.DeadlineExceeded) {
		t.Fatalf("an unanswered publish of a stream with no fault: %v, want KV_b's", g)
	}
	f.publishFailed("KV_b", context.DeadlineExceeded, false) // the caller gave up: an outage, renewing
	f.stored("KV_b")
	if g := f.Last(); g == nil || g.Stream != "CAIRN" {
		t.Fatalf("after KV_b stored: %v, want CAIRN's", g)
	}
	if g := f.Last("CAIRN"); g != nil {
		t.Fatalf("Last leaving CAIRN out: %v, want none", g)
	}
	f.stored("CAIRN")
	if g := f.Last(); g != nil {
		t.Fatalf("after CAIRN stored: %v, want none", g)
	}
	var none *WriteFaults
	none.stored("CAIRN")
	none.publishFailed("CAIRN", full, false)
	if none.Last() != nil {
		t.Fatal("a nil WriteFaults holds a fault")
	}
}
