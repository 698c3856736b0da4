package main

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
)

// The built-in capabilities: a key-value store scoped to the calling run's
// session, on a JetStream KV bucket.
func builtinCapabilities() []runtime.Capability {
	return []runtime.Capability{
		{Name: "kv.get", Description: "Read a value of this session's key-value store; value is null when absent.",
			InputSchema: json.RawMessage(`{"type":"object","required":["key"],"properties":{"key":{"type":"string","minLength":1,"maxLength":256}},"additionalProperties":false}`)},
		{Name: "kv.put", Description: "Write a JSON value to this session's key-value store.",
			InputSchema: json.RawMessage(`{"type":"object","required":["key","value"],"properties":{"key":{"type":"string","minLength":1,"maxLength":256},"value":{}},"additionalProperties":false}`)},
		{Name: "kv.list", Description: "List the keys of this session's key-value store.",
			InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
	}
}

type kvBackend struct {
	kv      jetstream.KeyValue
	session string
	keys    *events.Keyring
}

type kvEntry struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func (b kvBackend) key(k string) string {
	h := sha256.Sum256([]byte(k))
	return b.session + "." + hex.EncodeToString(h[:12])
}

// backendFor scopes the built-in store to a run's session.
// Values are sealed with the log's payload keys when it has them: what a
// script stores is as much the run's content as its transcript.
func backendFor(kv jetstream.KeyValue, keys *events.Keyring) func(events.Run) runtime.Backend {
	return func(r events.Run) runtime.Backend { return kvBackend{kv: kv, session: r.SessionID, keys: keys} }
}

// kvOpTimeout bounds one capability call on the store: the attempt's own
// context may carry a deadline of hours (the root's wall-clock budget),
// and a NATS that went away must fail the call, not hold the attempt.
const kvOpTimeout = 30 * time.Second

func (b kvBackend) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	ctx, cancel := context.WithTimeout(ctx, kvOpTimeout)
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
		e, err := b.kv.Get(ctx, b.key(args.Key))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return jstool.Value{JSON: json.RawMessage(`{"key":` + quote(args.Key) + `,"value":null}`)}, nil
		}
		if err != nil {
			return jstool.Value{}, err
		}
		v, err := b.keys.Open(e.Value())
		if err != nil {
			return jstool.Value{}, fmt.Errorf("kv %q: %w", args.Key, err)
		}
		return jstool.Value{JSON: v}, nil
	case "kv.put":
		v, _ := json.Marshal(kvEntry{Key: args.Key, Value: args.Value})
		if _, err := b.kv.Put(ctx, b.key(args.Key), b.keys.Seal(v)); err != nil {
			return jstool.Value{}, err
		}
		return jstool.Value{JSON: json.RawMessage(`{"ok":true}`)}, nil
	case "kv.list":
		lister, err := b.kv.ListKeysFiltered(ctx, b.session+".>")
		if err != nil {
			return jstool.Value{}, err
		}
		keys := []string{}
		for k := range lister.Keys() {
			if e, err := b.kv.Get(ctx, k); err == nil {
				var ent kvEntry
				if v, err := b.keys.Open(e.Value()); err == nil && json.Unmarshal(v, &ent) == nil {
					keys = append(keys, ent.Key)
				}
			}
		}
		sort.Strings(keys)
		out, _ := json.Marshal(map[string]any{"keys": keys})
		return jstool.Value{JSON: out}, nil
	}
	return jstool.Value{}, fmt.Errorf("no capability %q", inv.Capability)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
