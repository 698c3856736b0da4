package jetstream_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// authServer starts a server on a client port with credentials from a
// file in a temporary directory.
func authServer(t *testing.T) (*jetstream.Server, *jetstream.Credentials) {
	t.Helper()
	dir := t.TempDir()
	creds, err := jetstream.LoadOrCreateCredentials(filepath.Join(dir, "nats-credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: filepath.Join(dir, "jetstream"), Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv, creds
}

func TestAuthUnauthenticatedClientRefused(t *testing.T) {
	srv, creds := authServer(t)
	if strings.Contains(srv.Addr(), "@") || !strings.Contains(srv.ClientURL(), "@") {
		t.Fatalf("Addr %q must carry no credentials, ClientURL must", srv.Addr())
	}
	for name, opts := range map[string][]nats.Option{
		"no credentials":  nil,
		"wrong password":  {nats.UserInfo(jetstream.AdminUser, creds.Reader)},
		"unknown user":    {nats.UserInfo("nobody", creds.Admin)},
		"route user":      {nats.UserInfo(jetstream.RouteUser, creds.Admin)},
		"token, not user": {nats.Token(creds.Admin)},
	} {
		nc, err := nats.Connect(srv.Addr(), append(opts, nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Fatalf("%s: connected", name)
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("%s: err = %v, want an authorization violation", name, err)
		}
	}
	// The default, generated per process: a listening server is never open.
	open, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(context.Background())
	if nc, err := nats.Connect(open.Addr(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("a server without configured credentials accepted an unauthenticated client")
	}
	nc, err := nats.Connect(open.ClientURL())
	if err != nil {
		t.Fatalf("ClientURL: %v", err)
	}
	nc.Close()
}

func TestAuthAdminDoesWhatTheStoreDoes(t *testing.T) {
	srv, creds := authServer(t)
	for name, connect := range map[string]func() (*nats.Conn, error){
		"in-process": func() (*nats.Conn, error) { return srv.Connect() },
		"client port": func() (*nats.Conn, error) {
			return nats.Connect(srv.Addr(), nats.UserInfo(jetstream.AdminUser, creds.Admin))
		},
	} {
		nc, err := connect()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s := newStore(t, nc, jetstream.Config{})
		h, err := s.Open(context.Background(), "auth-"+name[:2], "r")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := h.SaveCheckpoint(context.Background(), cp(1, text("m1", "x"))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := h.LoadCheckpoint(context.Background())
		if err != nil || got == nil || got.Revision != 1 {
			t.Fatalf("%s: checkpoint %+v, %v", name, got, err)
		}
		nc.Close()
	}
}

func TestAuthReaderReadsButCannotWrite(t *testing.T) {
	srv, creds := authServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	s := newStore(t, admin, jetstream.Config{})
	h, err := s.Open(ctx, "sess", "run")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SaveCheckpoint(ctx, cp(1, text("m1", "x"))); err != nil {
		t.Fatal(err)
	}
	ajs, _ := njs.New(admin)
	// A bucket the node keeps: not the reader's.
	kv, err := ajs.CreateKeyValue(ctx, njs.KeyValueConfig{Bucket: "cairn_kv"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("secret")); err != nil {
		t.Fatal(err)
	}
	ast, err := ajs.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	before := ast.CachedInfo().State.Msgs
	if before == 0 {
		t.Fatal("nothing stored")
	}

	var mu sync.Mutex
	var asyncErrs []error
	reader, err := nats.Connect(srv.Addr(), nats.UserInfo(jetstream.ReaderUser, creds.Reader),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			asyncErrs = append(asyncErrs, err)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	js, err := njs.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("account info: %v", err)
	}
	st, err := js.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	// An ordered consumer reads the whole log.
	oc, err := st.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	batch, err := oc.Fetch(int(before), njs.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++
	}
	if uint64(n) != before {
		t.Fatalf("ordered consumer read %d of %d messages (%v)", n, before, batch.Error())
	}
	// A named pull consumer: created, read, acknowledged, deleted.
	c, err := st.CreateOrUpdateConsumer(ctx, njs.ConsumerConfig{Name: "audit", AckPolicy: njs.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("pull consumer: %v", err)
	}
	m, err := c.Next(njs.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	if err := st.DeleteConsumer(ctx, "audit"); err != nil {
		t.Fatalf("delete consumer: %v", err)
	}
	// Direct gets: by sequence and last by subject.
	if _, err := st.GetMsg(ctx, 1); err != nil {
		t.Fatalf("direct get: %v", err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, m.Subject()); err != nil {
		t.Fatalf("direct get last: %v", err)
	}
	// The legacy API's push ordered consumer (flow control, heartbeats).
	ljs, _ := reader.JetStream()
	sub, err := ljs.SubscribeSync("cairn.>", nats.OrderedConsumer(), nats.BindStream("CAIRN"))
	if err != nil {
		t.Fatalf("push ordered consumer: %v", err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("push ordered consumer: %v", err)
	}
	_ = sub.Unsubscribe()

	// Writes are refused: the fabricated event, a JetStream publish, a
	// purge, another stream, the node's bucket.
	if err := reader.Publish(events.RunCreatedSubject("x", "y"), []byte(`{"type":"created"}`)); err != nil {
		t.Fatal(err)
	}
	_ = reader.Flush()
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	_, err = js.Publish(pctx, events.RunCreatedSubject("x", "y"), []byte(`{}`))
	pcancel()
	if err == nil {
		t.Fatal("JetStream publish of a created event acknowledged")
	}
	// A refused API request is never answered: each waits a second.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, time.Second)
		t.Cleanup(cancel)
		return c
	}
	if err := st.Purge(short()); err == nil {
		t.Fatal("purge allowed")
	}
	if err := js.DeleteStream(short(), "CAIRN"); err == nil {
		t.Fatal("delete stream allowed")
	}
	if _, err := js.CreateStream(short(), njs.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}}); err == nil {
		t.Fatal("create stream allowed")
	}
	if _, err := js.KeyValue(short(), "cairn_kv"); err == nil {
		t.Fatal("the node's bucket is readable")
	}
	// Nor may the reader listen in: the log's subjects, the node's replies.
	for _, subj := range []string{"cairn.>", ">", "_CAIRN_INBOX.>", "$JS.API.>"} {
		s, err := reader.SubscribeSync(subj)
		if err == nil {
			_ = reader.Flush()
			_ = s.Unsubscribe()
		}
	}
	_ = reader.Flush()
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	var pubDenied, subDenied int
	for _, err := range asyncErrs {
		if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(err.Error(), "Permissions Violation") {
			if strings.Contains(err.Error(), "Publish") {
				pubDenied++
			} else if strings.Contains(err.Error(), "Subscription") {
				subDenied++
			}
		}
	}
	mu.Unlock()
	if pubDenied == 0 || subDenied < 4 {
		t.Fatalf("permission violations: %d publish, %d subscribe (%v)", pubDenied, subDenied, asyncErrs)
	}
	ast, err = ajs.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	if after := ast.CachedInfo().State.Msgs; after != before {
		t.Fatalf("the log holds %d messages, had %d: the reader wrote", after, before)
	}
	if _, err := ast.GetLastMsgForSubject(ctx, events.RunCreatedSubject("x", "y")); err == nil {
		t.Fatal("the fabricated created event is stored")
	}
}

func TestAuthCredentialsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "nats-credentials.json")
	c1, err := jetstream.LoadOrCreateCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %#o, want 0600", fi.Mode().Perm())
	}
	if len(c1.Admin) != 64 || len(c1.Reader) != 64 || c1.Admin == c1.Reader {
		t.Fatalf("credentials %d and %d hex characters", len(c1.Admin), len(c1.Reader))
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d files: a temporary one was left", len(entries))
	}
	c2, err := jetstream.LoadOrCreateCredentials(path)
	if err != nil {
		t.Fatal(err)
	}
	if *c2 != *c1 {
		t.Fatal("a second start generated new credentials")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.LoadOrCreateCredentials(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("err = %v, want one naming %s and its mode 0644", err, path)
	}
	if _, err := jetstream.LoadCredentials(path); err == nil {
		t.Fatal("LoadCredentials accepted mode 0644")
	}
	if err := os.WriteFile(path, []byte(`{"cairn":"short","reader":""}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := jetstream.LoadOrCreateCredentials(path); err == nil {
		t.Fatal("short passwords accepted")
	}
}

// A cluster's routes authenticate with the shared secret: a member with
// another secret does not join.
func TestAuthRouteSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster")
	}
	if _, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: t.TempDir(), ServerName: "x",
		Cluster: &jetstream.ClusterConfig{Name: "c", Host: "127.0.0.1", Port: -1, Secret: "short"}}); err == nil {
		t.Fatal("a 5-byte route secret accepted")
	}
}
