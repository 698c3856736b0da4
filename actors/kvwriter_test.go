package actors

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// entries lists what Get would return for every key under a prefix: the
// last value of each key, deleted and purged keys left out, keys of other
// prefixes (and the prefix itself) not matched; and it leaves no consumer
// on the server, where a key listing makes one per call.
func TestKVWriterEntriesMatchGet(t *testing.T) {
	ctx := context.Background()
	kv, k := testBucket(t, "cairn_children")
	for _, op := range []struct{ key, value string }{
		{"r1.b", "b1"}, {"r1.a", "a1"}, {"r1.b", "b2"}, {"r1.c", "c1"}, {"r1.d", "d1"},
		{"r10.a", "other run"}, {"r1", "the prefix itself"}, {"r1.e.f", "nested"},
	} {
		if _, err := k.put(ctx, op.key, []byte(op.value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.delete(ctx, "r1.c"); err != nil { // our delete marker
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
