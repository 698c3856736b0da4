package actors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
)

// entries lists what Get would return for every key under a prefix: the
// last value of each key, deleted and purged keys left out, keys of other
// prefixes (and the prefix itself) not matched; and it leaves no consumer
// on the server, where a key listing makes one per call.
func TestKVWriterEntriesMatchGet(t *testing.T) {
	ctx := context.Background()
	kv, k := testBucket(t, activeBucket) // the bucket that allows purge markers with a TTL
	for _, op := range []struct{ key, value string }{
		{"r1.b", "b1"}, {"r1.a", "a1"}, {"r1.b", "b2"}, {"r1.c", "c1"}, {"r1.d", "d1"},
		{"r10.a", "other run"}, {"r1", "the prefix itself"}, {"r1.e.f", "nested"},
	} {
		if _, err := k.put(ctx, op.key, []byte(op.value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.purge(ctx, "r1.c", time.Minute, 0); err != nil { // our purge marker
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "r1.d"); err != nil { // nats.go's purge marker
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "r1.a"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "r1.a", []byte("a2")); err != nil { // put again after a delete
		t.Fatal(err)
	}
	var got []string
	if err := k.entries(ctx, "r1", func(key string, value []byte) error {
		got = append(got, key+"="+string(value))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := "r1.a=a2 r1.b=b2 r1.e.f=nested"
	if strings.Join(got, " ") != want {
		t.Fatalf("entries: %v, want %s", got, want)
	}
	for _, e := range strings.Fields(want) {
		key, value, _ := strings.Cut(e, "=")
		kve, err := kv.Get(ctx, key)
		if err != nil || string(kve.Value()) != value {
			t.Fatalf("Get(%s) = %v, %v; entries said %s", key, kve, err, value)
		}
	}
	if err := k.entries(ctx, "r2", func(string, []byte) error { t.Fatal("an entry for a prefix with none"); return nil }); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx) // a fresh read of the bucket's stream
	if err != nil {
		t.Fatal(err)
	}
	if n := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.Consumers; n != 0 {
		t.Fatalf("%d consumers left on the bucket's stream", n)
	}
}

// A key removed with purge leaves nothing behind: its earlier revisions
// are rolled up at once, and its marker expires (the active set would
// otherwise keep a marker for every run that ever finished, read at
// every sweep). scan reports keys whose last message is an old-style
// delete marker, and no others.
func TestKVWriterPurgeLeavesNothing(t *testing.T) {
	ctx := context.Background()
	kv, k := testBucket(t, activeBucket)
	for _, key := range []string{"gone", "kept", "old"} {
		if _, err := k.put(ctx, key, []byte(`{"session_id":"s"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.put(ctx, "gone", []byte(`{"session_id":"s2"}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "old"); err != nil { // what earlier builds left
		t.Fatal(err)
	}
	if err := k.purge(ctx, "gone", time.Second, 0); err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.AllowMsgTTL {
		t.Fatal("the active set's stream does not allow message TTLs")
	}
	hist, err := kv.History(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].Operation() != jetstream.KeyValuePurge {
		t.Fatalf("the purged key's history: %d entries, want its purge marker alone", len(hist))
	}
	var live, deleted []string
	var oldRev uint64
	if err := k.scan(ctx, "", func(key string, _ []byte) error { live = append(live, key); return nil },
		func(key string, rev uint64) { deleted, oldRev = append(deleted, key), rev }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(live, " ") != "kept" || strings.Join(deleted, " ") != "old" {
		t.Fatalf("scan: live %v, deleted %v; want [kept], [old]", live, deleted)
	}
	// A purge fenced on the marker's revision is refused once the key is
	// written again (a run marked active anew keeps its entry), and made
	// while the marker is still its last revision.
	e, err := kv.Get(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.purge(ctx, "kept", time.Minute, e.Revision()-1); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("a purge fenced on a revision the key moved past: %v, want a conflict", err)
	}
	if _, err := kv.Get(ctx, "kept"); err != nil {
		t.Fatalf("the key a refused purge was fenced on: %v", err)
	}
	if err := k.purge(ctx, "old", time.Minute, oldRev); err != nil {
		t.Fatalf("a purge fenced on the delete marker's revision: %v", err)
	}
	// The marker expires: it carries its TTL (a second here, a minute for
	// the node's), which the bucket's stream allows (checked above); the
	// server removes it then. Read from its headers rather than waited
	// for: the expiry is the server's, on the server's clock.
	var ops, ttls []string
	if err := k.w.Scan(ctx, k.subject("gone"), func(_ string, _ uint64, h nats.Header, _ []byte) error {
		ops, ttls = append(ops, h.Get(kvOperation)), append(ttls, h.Get(jetstream.MsgTTLHeader))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ops, " ") != kvOperationPurge || strings.Join(ttls, " ") != "1s" {
		t.Fatalf("the purged key's messages: operations %v, TTLs %v; want one purge marker with a TTL of 1s", ops, ttls)
	}
}
