package actors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// kvBucket writes a KV bucket's entries through a store Log on the
// bucket's stream, speaking the bucket's wire format (subject $KV.<bucket>.<key>,
// a KV-Operation header for deletes): a Create is a write fenced on the
// key at 0, an Update one fenced at the read revision, a Put or Delete an
// unfenced one. Readers (Get, watchers) see exactly what nats.go's own
// writes would produce. Every write has a Msg-Id of its own, so the
// Log can settle a lost acknowledgement and a retry is never applied
// twice.
type kvBucket struct {
	w      *cjs.Log
	bucket string
	prefix string
	seq    atomic.Uint64
}

func newKVBucket(w *cjs.Log, bucket string) *kvBucket {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &kvBucket{w: w, bucket: bucket, prefix: bucket + "." + hex.EncodeToString(b[:]) + "."}
}

func (k *kvBucket) subject(key string) string { return "$KV." + k.bucket + "." + key }

// id is unique to one write of this process: two writers that read the
// same revision must never share a Msg-Id, or the second would be
// answered as a duplicate of the first.
func (k *kvBucket) id() string { return k.prefix + strconv.FormatUint(k.seq.Add(1), 36) }

// create stores key only if it has no entry; an existing one is a
// conflict (runtime.ErrConflict). Unlike kv.Create, a delete marker counts
// as an entry: its users (the ledger, wait registrations) never delete.
func (k *kvBucket) create(ctx context.Context, key string, value []byte) (uint64, error) {
	return k.w.Write(ctx, &nats.Msg{Subject: k.subject(key), Data: value}, k.id(), k.subject(key), 0)
}

// update stores key only if its last revision is rev; otherwise a
// conflict (runtime.ErrConflict).
func (k *kvBucket) update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return k.w.Write(ctx, &nats.Msg{Subject: k.subject(key), Data: value}, k.id(), k.subject(key), rev)
}

func (k *kvBucket) put(ctx context.Context, key string, value []byte) (uint64, error) {
	return k.w.Write(ctx, &nats.Msg{Subject: k.subject(key), Data: value}, k.id(), "", 0)
}

// purge removes key: a purge marker rolls up (removes) every earlier
// revision, as kv.Purge does, and expires itself after ttl, so that
// nothing of the key is left to read. A plain delete marker stays for
// good: the active set kept one for every run that ever finished, and
// the sweep read them all, every SweepInterval. With at > 0 the purge is
// made only if the key's last revision is still at (else a conflict,
// runtime.ErrConflict). The bucket must allow message TTLs (bucketConfig).
func (k *kvBucket) purge(ctx context.Context, key string, ttl time.Duration, at uint64) error {
	msg := &nats.Msg{Subject: k.subject(key), Header: nats.Header{}}
	msg.Header.Set(kvOperation, kvOperationPurge)
	msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	msg.Header.Set(jetstream.MsgTTLHeader, ttl.String())
	fence := ""
	if at > 0 {
		fence = k.subject(key)
	}
	_, err := k.w.Write(ctx, msg, k.id(), fence, at)
	return err
}

// get returns key's value and revision, found false when the key has none
// (never written, deleted or purged). It reads the key's last message
// through the Log: on a replicated bucket from the stream's leader. A
// bucket's own Get may be answered by a direct get from any replica, one
// that is behind: its "not found" for a key written a moment ago (a
// child just recorded, a budget entry just created) would be taken as the
// truth by whoever decides on it. A single replica's only copy is read
// directly. Each read is bounded (the Log's per-request timeout).
func (k *kvBucket) get(ctx context.Context, key string) (value []byte, rev uint64, found bool, err error) {
	m, err := k.w.Last(ctx, k.subject(key))
	if err != nil || m == nil {
		return nil, 0, false, err
	}
	switch m.Header.Get(kvOperation) {
	case kvOperationDel, kvOperationPurge:
		return nil, m.Sequence, false, nil
	}
	return m.Data, m.Sequence, true, nil
}

// entries calls fn with the value of every key under prefix (the keys
// "<prefix>.>"; every key for ""), in key order, as Get would return it:
// the last value of each key, deleted and purged keys left out. It reads
// with batched direct gets: a key listing or a watcher would create and
// delete an ordered consumer on the server at every call, and a listing
// then needs a Get per key besides.
func (k *kvBucket) entries(ctx context.Context, prefix string, fn func(key string, value []byte) error) error {
	return k.scan(ctx, prefix, fn, nil)
}

// scan is entries that also calls deleted, when given, with each delete
// marker (not a purge) as the scan meets it: its key and revision. A key
// written again later in the scan is met again (entries sees its value);
// a write fenced on the marker's revision is then refused.
func (k *kvBucket) scan(ctx context.Context, prefix string, fn func(key string, value []byte) error, deleted func(key string, rev uint64)) error {
	values := map[string][]byte{}
	subjPrefix := "$KV." + k.bucket + "."
	filter := subjPrefix + ">"
	if prefix != "" {
		filter = subjPrefix + prefix + ".>"
	}
	err := k.w.Scan(ctx, filter, func(subject string, seq uint64, header nats.Header, data []byte) error {
		key := strings.TrimPrefix(subject, subjPrefix)
		op := header.Get(kvOperation)
		switch op {
		case kvOperationDel, kvOperationPurge:
			delete(values, key)
		default:
			values[key] = data
		}
		if op == kvOperationDel && deleted != nil {
			deleted(key, seq)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, key := range slices.Sorted(maps.Keys(values)) {
		if err := fn(key, values[key]); err != nil {
			return err
		}
	}
	return nil
}

// The KV wire format's delete marker (nats.go's jetstream package keeps
// these names unexported).
const (
	kvOperation      = "KV-Operation"
	kvOperationDel   = "DEL"
	kvOperationPurge = "PURGE"
)
