package events_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
)

func keyring(t testing.TB, entries ...string) *events.Keyring {
	t.Helper()
	k, err := events.ParseKeyring(strings.Join(entries, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newKey(t testing.TB, id string) string {
	t.Helper()
	line, err := events.NewKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

func TestSealedEventsRoundTripAndHideTheirBody(t *testing.T) {
	const secret = `sk-live-"<&>\planted`
	k := keyring(t, newKey(t, "k1"))
	ev := events.Envelope{Type: events.RunCreated, Version: events.SchemaVersion, SessionID: "s1", RunID: "r1",
		Time: time.Unix(100, 0).UTC(), Data: []byte(`{"message":` + quoteJSON(secret) + `}`)}
	body, hdrs, err := k.Encode(ev, "s1.r1.created")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(body, []byte("planted")) || bytes.Contains(body, []byte("cairn.run.created")) {
		t.Fatalf("sealed body shows its content: %q", body)
	}
	if hdrs[events.HeaderKey] != "k1" || hdrs[events.CEType] != string(events.RunCreated) {
		t.Fatalf("headers: %v, want the key ID and the readable CloudEvents type", hdrs)
	}
	if id, sealed := events.SealedBy(body); !sealed || id != "k1" {
		t.Fatalf("SealedBy: %q %v", id, sealed)
	}
	got, err := k.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data) != string(ev.Data) || got.RunID != "r1" {
		t.Fatalf("decoded %+v", got)
	}
	// Two seals of one body differ (random nonces).
	again, _, _ := k.Encode(ev, "s1.r1.created")
	if bytes.Equal(body, again) {
		t.Fatal("two seals are the same bytes")
	}
	// A reader without the key is told so, never handed garbage.
	if _, err := events.Decode(body); !errors.Is(err, events.ErrSealed) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("plain Decode of a sealed body: %v, want ErrSealed naming k1", err)
	}
	var none *events.Keyring
	if _, err := none.Decode(body); !errors.Is(err, events.ErrSealed) {
		t.Fatalf("nil keyring: %v", err)
	}
	if other := keyring(t, newKey(t, "k2")); true {
		if _, err := other.Decode(body); !errors.Is(err, events.ErrSealed) || !strings.Contains(err.Error(), `"k1"`) {
			t.Fatalf("keyring without k1: %v", err)
		}
	}
	// Plain bodies pass through a keyring: a log written before the codec
	// was on, or by a node without it, stays readable.
	plain, _, err := events.Encode(ev, "s1.r1.created")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Decode(plain); err != nil || got.RunID != "r1" {
		t.Fatalf("plain body through a keyring: %+v, %v", got, err)
	}
	if got := none.Seal(plain); !bytes.Equal(got, plain) {
		t.Fatal("a nil keyring changed a body")
	}
}

func TestKeyRotationOpensOldBodies(t *testing.T) {
	old, next := newKey(t, "2026-01"), newKey(t, "2026-07")
	before := keyring(t, old)
	sealed := before.Seal([]byte(`{"a":1}`))
	after := keyring(t, next, old)
	if after.KeyID() != "2026-07" {
		t.Fatalf("sealing key %q, want the first", after.KeyID())
	}
	if got, err := after.Open(sealed); err != nil || string(got) != `{"a":1}` {
		t.Fatalf("old body under the rotated keyring: %q, %v", got, err)
	}
	if id, _ := events.SealedBy(after.Seal([]byte("x"))); id != "2026-07" {
		t.Fatalf("new bodies sealed with %q", id)
	}
	// The same ID with another secret does not open: a wrong key is an
	// error, never a wrong plaintext.
	impostor := keyring(t, "2026-01:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	if _, err := impostor.Open(sealed); !errors.Is(err, events.ErrUnsealable) {
		t.Fatalf("wrong secret: %v, want ErrUnsealable", err)
	}
}

func TestTamperedBodiesDoNotOpen(t *testing.T) {
	k := keyring(t, newKey(t, "k1"))
	sealed := k.Seal([]byte(`{"a":"b"}`))
	for i := range sealed {
		b := bytes.Clone(sealed)
		b[i] ^= 0x01
		got, err := k.Open(b)
		switch {
		case i < len("\x00CK1"):
			// A flip in the magic makes a body that is not sealed: Open
			// passes it through unchanged (and JSON then refuses it).
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("byte %d flipped: %q, %v; want the body passed through", i, got, err)
			}
		case err == nil:
			t.Fatalf("byte %d flipped still opened, to %q", i, got)
		}
	}
	for n := len("\x00CK1"); n < len(sealed); n++ {
		if got, err := k.Open(sealed[:n]); err == nil {
			t.Fatalf("truncated to %d bytes opened, to %q", n, got)
		}
	}
}

func TestKeyringRefusesBadKeys(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "at least one key"},
		{"no colon", "k1" + good, "entry 1: want <id>:<base64 key>"},
		{"not base64", "k1:***", `entry 1 ("k1"): the key is not base64`},
		{"short", "k1:" + base64.StdEncoding.EncodeToString([]byte("short")), "5 bytes, want 32"},
		{"bad id", "k/1:" + good, `key ID "k/1"`},
		{"twice", "k1:" + good + "\nk1:" + good, `"k1": given twice`},
		{"long id", strings.Repeat("a", 65) + ":" + good, "1 to 64 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.ParseKeyring(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), good) {
				t.Fatal("the error shows the secret")
			}
		})
	}
	k := keyring(t, "# comment", "", "a:"+good+", b:"+good)
	if k.KeyID() != "a" {
		t.Fatalf("first key %q", k.KeyID())
	}
}

// FuzzOpen: a body read off the log is untrusted input (anyone who could
// publish on the stream wrote it). Open never panics, and what it opens
// was sealed by the keyring.
func FuzzOpen(f *testing.F) {
	k := keyring(f, "k1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32)))
	f.Add(k.Seal([]byte(`{"type":"x"}`)))
	f.Add([]byte("\x00CK1"))
	f.Add([]byte("\x00CK1\x02k1"))
	f.Add([]byte("\x00CK1\xffk1"))
	f.Add([]byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := k.Open(body)
		if _, sealed := events.SealedBy(body); !sealed {
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("plain body changed: %q, %v", got, err)
			}
			return
		}
		if err == nil && !bytes.Equal(k.Seal(got)[:7], body[:7]) {
			t.Fatalf("opened a body with another prefix")
		}
		_, _ = k.Decode(body)
	})
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// BenchmarkEncode: an event of a 3 KB payload encoded plain and sealed
// (the codec's CPU per commit; B1s in test/bench measures it through the
// store).
func BenchmarkEncode(b *testing.B) {
	k := keyring(b, newKey(b, "k1"))
	ev := events.Envelope{Type: events.CheckpointCommitted, Version: events.SchemaVersion, SessionID: "s1", RunID: "r1",
		Time: time.Unix(100, 0).UTC(), Data: []byte(`{"text":"` + strings.Repeat("x", 3000) + `"}`)}
	for _, tc := range []struct {
		name string
		k    *events.Keyring
	}{{"plain", nil}, {"sealed", k}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				body, _, err := tc.k.Encode(ev, "s1.r1.1")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tc.k.Decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
