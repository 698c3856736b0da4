package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/store/storetest"
)

func sealing(t testing.TB, entries ...string) *events.Keyring {
	t.Helper()
	k, err := events.ParseKeyring(strings.Join(entries, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newKeyEntry(t testing.TB, id string) string {
	t.Helper()
	line, err := events.NewKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// The store behaves the same with its events sealed (the payload codec).
func TestConformanceSealed(t *testing.T) {
	keys := sealing(t, newKeyEntry(t, "k1"))
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		nc := natstest.Connect(t, natstest.Server(t))
		s, err := jetstream.New(context.Background(), nc, jetstream.Config{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// With the codec on, no planted secret is in the server's files, inline
// or offloaded to the object store; headers stay readable; a reader
// without the key is told so; a rotated keyring reads the old events and
// seals new ones with the new key.
func TestSealedAtRest(t *testing.T) {
	const secret = `sk-planted-"<&>\-7d1f0c`
	dir := t.TempDir()
	srv := natstest.ServerAt(t, dir)
	nc := natstest.Connect(t, srv)
	ctx := context.Background()
	old := newKeyEntry(t, "2026-11")
	s := newStore(t, nc, jetstream.Config{Keys: sealing(t, old)})
	h, err := s.Open(ctx, "sealed", "r")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 1_200_000) + secret // offloaded
	if err := h.SaveCheckpoint(ctx, cp(1, text("m1", "the key is "+secret))); err != nil {
		t.Fatal(err)
	}
	if err := h.SaveCheckpoint(ctx, cp(2, text("m2", big))); err != nil {
		t.Fatal(err)
	}

	// The files: every byte the server keeps under its store directory.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	found := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("sk-planted")) {
			t.Errorf("%s holds the secret", path)
			found++
		}
		return nil
	})
	if err != nil || found > 0 {
		t.Fatalf("walk: %v; %d files hold the secret", err, found)
	}

	// natscli's view: readable headers, a ciphertext body.
	js, _ := njs.New(nc)
	st, err := js.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, events.CheckpointSubject("sealed", "r", false))
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(events.HeaderKey) != "2026-11" || m.Header.Get(events.CEType) != string(events.CheckpointCommitted) {
		t.Fatalf("headers %v: want the key ID and the CloudEvents type", m.Header)
	}
	if id, sealed := events.SealedBy(m.Data); !sealed || id != "2026-11" {
		t.Fatalf("body not sealed: %q", m.Data[:min(40, len(m.Data))])
	}

	// A store without the key refuses, naming it.
	plain := newStore(t, nc, jetstream.Config{})
	if _, err := plain.Open(ctx, "sealed", "r"); !errors.Is(err, events.ErrSealed) || !strings.Contains(err.Error(), "2026-11") {
		t.Fatalf("a store without the key: %v, want ErrSealed naming 2026-11", err)
	}

	// Rotation: the new key seals, the old one still opens.
	rotated := newStore(t, nc, jetstream.Config{Keys: sealing(t, newKeyEntry(t, "2026-12"), old)})
	h2, err := rotated.Open(ctx, "sealed", "r")
	if err != nil {
		t.Fatal(err)
	}
	w, err := h2.Load(ctx)
	if err != nil || len(w) != 2 || w[0].Text() != "the key is "+secret || w[1].Text() != big {
		t.Fatalf("window under the rotated keyring: %d messages, %v", len(w), err)
	}
	if err := h2.SaveCheckpoint(ctx, cp(3, text("m3", "after"))); err != nil {
		t.Fatal(err)
	}
	m, err = st.GetLastMsgForSubject(ctx, events.CheckpointSubject("sealed", "r", false))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := events.SealedBy(m.Data); id != "2026-12" {
		t.Fatalf("new commit sealed with %q, want the new key", id)
	}
	got, err := h2.LoadCheckpoint(ctx)
	if err != nil || got.Revision != 3 {
		t.Fatalf("checkpoint: %+v, %v", got, err)
	}
}
