// Package kvcap is the built-in capability a run's scripts reach as
// caps.kv: a key-value store scoped to the run's session, on a JetStream
// KV bucket. Keys are hashed into the bucket's key space under the
// session's ID; each value holds its own key, and is sealed with the
// log's payload keys when the node has them (what a script stores is as
// much the run's content as its transcript).
package kvcap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// Capabilities are the store's three calls, for the node's catalog.
func Capabilities() []runtime.Capability {
	return []runtime.Capability{
		{Name: "kv.get", Description: "Read a value of this session's key-value store; value is null when absent.",
			InputSchema: json.RawMessage(`{"type":"object","required":["key"],"properties":{"key":{"type":"string","minLength":1,"maxLength":256}},"additionalProperties":false}`)},
		{Name: "kv.put", Description: "Write a JSON value to this session's key-value store.",
			InputSchema: json.RawMessage(`{"type":"object","required":["key","value"],"properties":{"key":{"type":"string","minLength":1,"maxLength":256},"value":{}},"additionalProperties":false}`)},
		{Name: "kv.list", Description: "List the keys of this session's key-value store.",
			InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
	}
}

// For scopes the store on kv to a run's session (keys: the log's payload
// keys, nil when payloads are not sealed).
func For(kv jetstream.KeyValue, keys *events.Keyring) func(events.Run) runtime.Backend {
	return func(r events.Run) runtime.Backend { return backend{kv: kv, session: r.SessionID, keys: keys} }
}

type backend struct {
	kv      jetstream.KeyValue
	session string
	keys    *events.Keyring
}

type entry struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func (b backend) key(k string) string {
	h := sha256.Sum256([]byte(k))
	return b.session + "." + hex.EncodeToString(h[:12])
}

// Bounds of a capability call on the store.
const (
	// callTimeout bounds one call, its retries included. It is a third of
	// run_js's time limit (jsexec.DefaultTimeout, 30 s): a call that meets
	// a longer outage fails in the script, which may catch it, instead of
	// holding the script until its own limit ends it (before, the call's
	// bound was 30 s too, and the script always went first). The attempt's
	// own context may carry a deadline of hours (the root's wall-clock
	// budget).
	callTimeout = 10 * time.Second
	// tryTimeout bounds one request of a call. A request sent just before
	// NATS went away (a restart) is never answered: it is sent again,
	// through the reconnect, once tryTimeout has passed, rather than
	// waited for until the call's end. The store answers in milliseconds;
	// every request of the capability may be sent twice (a get, a list,
	// a put of the same value).
	tryTimeout = 2 * time.Second
	// listTry bounds one listing of a session's keys, which streams them
	// all.
	listTry = 5 * time.Second
)

// Invoke implements runtime.Backend.
func (b backend) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var args struct {
		Key   string          `json:"key"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(inv.Args, &args); err != nil {
		return jstool.Value{}, fmt.Errorf("arguments: %w", err)
	}
	switch inv.Capability {
	case "kv.get":
		e, err := b.get(ctx, b.key(args.Key))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return jstool.Value{JSON: json.RawMessage(`{"key":` + quote(args.Key) + `,"value":null}`)}, nil
		}
		if err != nil {
			return jstool.Value{}, fmt.Errorf("kv %q: %w", args.Key, err)
		}
		v, err := b.keys.Open(e.Value())
		if err != nil {
			return jstool.Value{}, fmt.Errorf("kv %q: %w", args.Key, err)
		}
		return jstool.Value{JSON: v}, nil
	case "kv.put":
		v, _ := json.Marshal(entry{Key: args.Key, Value: args.Value})
		sealed := b.keys.Seal(v)
		err := cjs.Retry(ctx, tryTimeout, func(ctx context.Context) error {
			_, err := b.kv.Put(ctx, b.key(args.Key), sealed)
			return err
		})
		if err != nil {
			return jstool.Value{}, fmt.Errorf("kv %q: %w", args.Key, err)
		}
		return jstool.Value{JSON: json.RawMessage(`{"ok":true}`)}, nil
	case "kv.list":
		return b.list(ctx)
	}
	return jstool.Value{}, fmt.Errorf("no capability %q", inv.Capability)
}

// get reads one key, sent again after an outage (cjs.Retry).
func (b backend) get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	var e jetstream.KeyValueEntry
	err := cjs.Retry(ctx, tryTimeout, func(ctx context.Context) (err error) {
		e, err = b.kv.Get(ctx, key)
		return err
	})
	return e, err
}

// list reads every key of the session. A read that fails fails the call:
// a list that silently left keys out would tell the script they are not
// there (before, a failed read of one key dropped it from the answer).
// A key deleted between the listing and its read is not listed.
func (b backend) list(ctx context.Context) (jstool.Value, error) {
	var hashed []string
	err := cjs.Retry(ctx, listTry, func(ctx context.Context) error {
		hashed = hashed[:0]
		lister, err := b.kv.ListKeysFiltered(ctx, b.session+".>")
		if err != nil {
			return err
		}
		for k := range lister.Keys() {
			hashed = append(hashed, k)
		}
		return ctx.Err() // the listing ends early when the context does
	})
	if err != nil {
		return jstool.Value{}, fmt.Errorf("kv list: %w", err)
	}
	keys := []string{}
	for _, k := range hashed {
		e, err := b.get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return jstool.Value{}, fmt.Errorf("kv list: read %s: %w", k, err)
		}
		v, err := b.keys.Open(e.Value())
		if err != nil {
			return jstool.Value{}, fmt.Errorf("kv list: %s: %w", k, err)
		}
		var ent entry
		if err := json.Unmarshal(v, &ent); err != nil {
			return jstool.Value{}, fmt.Errorf("kv list: %s: %w", k, err)
		}
		keys = append(keys, ent.Key)
	}
	sort.Strings(keys)
	out, _ := json.Marshal(map[string]any{"keys": keys})
	return jstool.Value{JSON: out}, nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Forget removes every key of a session from the store: the store's part
// of a purge when the session's retention runs out (package retention).
// The keys go without delete markers (a purge of the bucket's stream by
// subject): nothing reads a purged session's store again. It may be done
// again.
func Forget(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, sessionID string) error {
	if err := events.ValidID(sessionID); err != nil {
		return fmt.Errorf("kv forget: %w", err)
	}
	stream := "KV_" + kv.Bucket()
	err := cjs.Setup(ctx, func(ctx context.Context) error {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+kv.Bucket()+"."+sessionID+".>"))
	})
	if err != nil {
		return fmt.Errorf("kv forget session %s: %w", sessionID, err)
	}
	return nil
}
