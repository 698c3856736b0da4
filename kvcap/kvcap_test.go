package kvcap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/leakcheck"
	"github.com/cairn-agents/cairn/kvcap"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, natstest.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "cairn_kv"})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func call(t *testing.T, b runtime.Backend, capability, args string) (string, error) {
	t.Helper()
	v, err := b.Invoke(context.Background(), jstool.Invocation{Capability: capability, Args: json.RawMessage(args)})
	return string(v.JSON), err
}

func must(t *testing.T, b runtime.Backend, capability, args, want string) {
	t.Helper()
	got, err := call(t, b, capability, args)
	if err != nil || got != want {
		t.Fatalf("%s %s = %s, %v; want %s", capability, args, got, err, want)
	}
}

// Each session has a store of its own: what one puts, another does not
// read or list; a key never put reads as null; the list is sorted.
func TestStoreIsTheSessions(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) {
			kv := bucket(t)
			var keys *events.Keyring
			if sealed {
				key, err := events.NewKey("k1")
				if err != nil {
					t.Fatal(err)
				}
				if keys, err = events.ParseKeyring(key); err != nil {
					t.Fatal(err)
				}
			}
			for_ := kvcap.For(kv, keys)
			a, b := for_(events.Run{SessionID: "s-a", RunID: "r1"}), for_(events.Run{SessionID: "s-b", RunID: "r2"})
			must(t, a, "kv.put", `{"key":"zeta","value":{"n":1}}`, `{"ok":true}`)
			must(t, a, "kv.put", `{"key":"alpha","value":"secret words"}`, `{"ok":true}`)
			must(t, b, "kv.put", `{"key":"other","value":2}`, `{"ok":true}`)
			must(t, a, "kv.get", `{"key":"zeta"}`, `{"key":"zeta","value":{"n":1}}`)
			must(t, a, "kv.get", `{"key":"other"}`, `{"key":"other","value":null}`)
			must(t, a, "kv.list", `{}`, `{"keys":["alpha","zeta"]}`)
			must(t, b, "kv.list", `{}`, `{"keys":["other"]}`)
			must(t, for_(events.Run{SessionID: "s-c"}), "kv.list", `{}`, `{"keys":[]}`)
			// What the bucket holds: the script's keys and values in the
			// clear only when not sealed.
			lister, err := kv.ListKeys(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for k := range lister.Keys() {
				e, err := kv.Get(context.Background(), k)
				if err != nil {
					t.Fatal(err)
				}
				if plain := bytes.Contains(e.Value(), []byte(`"key":`)); plain == sealed {
					t.Fatalf("sealed %v, yet the bucket's value of %s is %q", sealed, k, e.Value())
				}
			}
		})
	}
}

func TestBadCalls(t *testing.T) {
	b := kvcap.For(bucket(t), nil)(events.Run{SessionID: "s"})
	for _, tc := range []struct{ capability, args, want string }{
		{"kv.get", `[1]`, "arguments"},
		{"kv.drop", `{}`, `no capability "kv.drop"`},
	} {
		if _, err := call(t, b, tc.capability, tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s %s: %v, want an error naming %q", tc.capability, tc.args, err, tc.want)
		}
	}
}

// failingGets is a bucket whose reads fail (NATS went away between the
// listing and the reads).
type failingGets struct {
	jetstream.KeyValue
}

var errRead = errors.New("nats: timeout")

func (f failingGets) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return nil, errRead
}

// A list whose reads fail fails: before, each key whose read failed was
// left out, and the script was told an empty store was all there was.
func TestListFailsWhenAReadFails(t *testing.T) {
	kv := bucket(t)
	b := kvcap.For(kv, nil)(events.Run{SessionID: "s"})
	must(t, b, "kv.put", `{"key":"a","value":1}`, `{"ok":true}`)
	broken := kvcap.For(failingGets{kv}, nil)(events.Run{SessionID: "s"})
	if got, err := call(t, broken, "kv.list", `{}`); !errors.Is(err, errRead) {
		t.Fatalf("kv.list with failing reads = %s, %v; want the read's error", got, err)
	}
	if got, err := call(t, broken, "kv.get", `{"key":"a"}`); !errors.Is(err, errRead) {
		t.Fatalf("kv.get with a failing read = %s, %v; want the read's error", got, err)
	}
}

// lossy is a bucket whose first request of each kind is lost, as one sent
// just before NATS went away: never answered, it fails only when its
// context ends.
type lossy struct {
	jetstream.KeyValue
	gets, puts atomic.Int32
}

func (l *lossy) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if l.gets.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return l.KeyValue.Get(ctx, key)
}

func (l *lossy) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if l.puts.Add(1) == 1 {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return l.KeyValue.Put(ctx, key, value)
}

// A request lost in an outage is sent again within the call, and the call
// ends well inside run_js's time limit (jsexec.DefaultTimeout), given a
// context that lasts as long as the script's. Before, the call waited for
// the lost answer for 30 s, as long as the script may run: the script
// timed out (a 2 s NATS restart failed 3 of 24 scripts).
func TestLostRequestIsSentAgain(t *testing.T) {
	kv := &lossy{KeyValue: bucket(t)}
	b := kvcap.For(kv, nil)(events.Run{SessionID: "s"})
	ctx, cancel := context.WithTimeout(context.Background(), jsexec.DefaultTimeout)
	defer cancel()
	began := time.Now()
	for _, c := range []struct{ capability, args, want string }{
		{"kv.put", `{"key":"a","value":1}`, `{"ok":true}`},
		{"kv.get", `{"key":"a"}`, `{"key":"a","value":1}`},
	} {
		v, err := b.Invoke(ctx, jstool.Invocation{Capability: c.capability, Args: json.RawMessage(c.args)})
		if err != nil || string(v.JSON) != c.want {
			t.Fatalf("%s %s after a lost request = %s, %v; want %s", c.capability, c.args, v.JSON, err, c.want)
		}
	}
	if took := time.Since(began); took > jsexec.DefaultTimeout/2 {
		t.Fatalf("two calls, each with a lost request, took %s: the script's limit is %s", took, jsexec.DefaultTimeout)
	}
}
