package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

func apiErr(code njs.ErrorCode, status int, desc string) error {
	return &njs.APIError{ErrorCode: code, Code: status, Description: desc}
}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"timeout", nats.ErrTimeout, true},
		{"deadline", context.DeadlineExceeded, true},
		{"wrapped deadline", fmt.Errorf("jetstream: publish x: %w", context.DeadlineExceeded), true},
		{"no responders", nats.ErrNoResponders, true},
		{"reconnecting", nats.ErrConnectionReconnecting, true},
		{"disconnected", nats.ErrDisconnected, true},
		{"closed", nats.ErrConnectionClosed, true},
		{"no servers", nats.ErrNoServers, true},
		{"reconnect buffer full", nats.ErrReconnectBufExceeded, true},
		{"no stream response", njs.ErrNoStreamResponse, true},
		{"jetstream not enabled", njs.ErrJetStreamNotEnabled, true},
		{"jetstream not enabled for account", njs.ErrJetStreamNotEnabledForAccount, true},
		{"cluster not available 10008", apiErr(10008, 503, "JetStream system temporarily unavailable"), true},
		{"insufficient resources 10023", apiErr(10023, 503, "insufficient resources"), true},
		{"storage exceeded 10047", apiErr(10047, 500, "insufficient storage resources available"), true},
		{"store failed, stream full 10077", fmt.Errorf("jetstream: publish x: %w", apiErr(10077, 503, "maximum bytes exceeded")), true},
		{"store failed, messages 10077", apiErr(10077, 503, "maximum messages exceeded"), true},
		{"store failed, disk 10077", apiErr(10077, 503, "write /data/jetstream/x.blk: no space left on device"), true},
		{"leader not ready 10163", apiErr(10163, 503, "expected last sequence per subject temporarily unavailable"), true},
		// Not an outage: no wait fixes them.
		{"message too large 10077", apiErr(10077, 503, "message size exceeds maximum allowed"), false},
		{"wrong last sequence 10071", apiErr(10071, 400, "wrong last sequence: 2"), false},
		{"wrong last sequence 10164", apiErr(10164, 400, "wrong last sequence"), false},
		{"stream not found", njs.ErrStreamNotFound, false},
		{"conflict", fmt.Errorf("jetstream: write x: %w", runtime.ErrConflict), false},
		{"lease lost", runtime.ErrLeaseLost, false},
		{"cancelled", context.Canceled, false},
		{"bad subject", nats.ErrBadSubject, false},
		{"max payload", nats.ErrMaxPayload, false},
		{"message not found", njs.ErrMsgNotFound, false},
		{"other", errors.New("decode: unexpected end of JSON input"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := jetstream.Unavailable(tc.err); got != tc.want {
				t.Fatalf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// What a stream refusing writes (full: its limit reached with
// discard-new, as a full disk refuses them) and a server gone answer to
// the store's writes and reads are outages; so are they with the
// connection down while the caller's context would wait much longer.
func TestUnavailableFromTheServer(t *testing.T) {
	srv := natstest.Server(t)
	nc := natstest.Connect(t, srv)
	ctx := context.Background()
	s := newStore(t, nc, jetstream.Config{})
	js, _ := njs.New(nc)
	st, err := js.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, &nats.Msg{Subject: "cairn.test.a", Data: []byte("x")}, "a1", "", 0); err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgs, cfg.Discard = 1, njs.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, err = s.Write(ctx, &nats.Msg{Subject: "cairn.test.a", Data: []byte("y")}, "a2", "", 0)
	if !jetstream.Unavailable(err) {
		t.Fatalf("a write to a full stream: %v; want an outage", err)
	}
	if errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("a write to a full stream: %v; want no conflict", err)
	}
}

// A store directory the server cannot write is refused at once, naming
// the directory, where the server used to wait 30 s and say only that it
// was not ready.
func TestStartServerRefusesAStoreDirItCannotWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, dir string }{
		{"a path through a file", filepath.Join(file, "jetstream")},
		{"a file", file},
	}
	if os.Geteuid() != 0 { // root writes into a read-only directory anyway
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, dir string }{"a read-only directory", ro})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: tc.dir})
			if err == nil {
				_ = srv.Close(context.Background())
				t.Fatal("the server started")
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("refused after %s: %v", took, err)
			}
			if !strings.Contains(err.Error(), tc.dir) {
				t.Fatalf("error %q does not name the directory %s", err, tc.dir)
			}
		})
	}
}

// Healthy is nil on a working server and ErrStoreFailed once JetStream is
// turned off, as the server does after a write it could not make.
func TestServerHealthy(t *testing.T) {
	srv := natstest.Server(t)
	if err := srv.Healthy(); err != nil {
		t.Fatalf("a fresh server: %v", err)
	}
	jetstream.TurnJetStreamOff(srv)
	if err := srv.Healthy(); !errors.Is(err, jetstream.ErrStoreFailed) {
		t.Fatalf("JetStream off: %v, want ErrStoreFailed", err)
	}
}
