package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// servingNATS is serving with the embedded server's client port open
// (--nats-listen); it returns the API's base URL and the NATS address.
func servingNATS(t *testing.T, dir string) (string, string) {
	t.Helper()
	natsAddr := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	return servingWith(t, dir, clusterOptions{natsListen: natsAddr, embedded: &embedded{}}), "nats://" + natsAddr
}

// fabricated publishes a created event of a run owned by alice, as an
// attacker on the client port would, and returns the error the publish
// met (synchronously or from the server).
func fabricated(t *testing.T, nc *nats.Conn, asyncErr <-chan error, run string) error {
	t.Helper()
	e, err := events.New(events.RunCreated, "s-"+run, run, 0, 0, time.Now(), events.Run{RunID: run, SessionID: "s-" + run,
		Agent: "researcher", Message: "fabricated", RootRunID: run, Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	body, headers, err := events.Encode(e, "fab-"+run)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(events.RunCreatedSubject("s-"+run, run))
	msg.Data = body
	for k, v := range headers {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(nats.MsgIdHdr, "fab-"+run)
	if err := nc.PublishMsg(msg); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	select {
	case err := <-asyncErr:
		return err
	case <-time.After(500 * time.Millisecond):
		return nil
	}
}

// listed reports whether alice's GET /v1/runs lists run.
func listed(t *testing.T, base, run string) bool {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/runs", nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/runs: %d %s", resp.StatusCode, b)
	}
	return bytes.Contains(b, []byte(`"`+run+`"`))
}

// The embedded server's client port (--nats-listen) admits no client
// without credentials, and the reader's cannot write the log: a
// fabricated created event never shows up in /v1/runs. (Before, an
// unauthenticated publish made a "running" run appear there.)
func TestNATSListenNeedsCredentials(t *testing.T) {
	dir := t.TempDir()
	base, natsURL := servingNATS(t, dir)

	fi, err := os.Stat(filepath.Join(dir, "nats-credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file mode %#o", fi.Mode().Perm())
	}
	if nc, err := nats.Connect(natsURL, nats.MaxReconnects(0)); err == nil {
		// The attack as it was: an unauthenticated publish.
		asyncErr := make(chan error, 4)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { asyncErr <- err })
		ferr := fabricated(t, nc, asyncErr, "unauth")
		nc.Close()
		time.Sleep(time.Second)
		t.Fatalf("an unauthenticated client connected to %s (publish err %v; the fabricated run listed: %v)", natsURL, ferr, listed(t, base, "unauth"))
	}

	creds, err := jetstream.LoadCredentials(credentialsPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	asyncErr := make(chan error, 4)
	reader, err := nats.Connect(natsURL, nats.UserInfo(jetstream.ReaderUser, creds.Reader), nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { asyncErr <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := fabricated(t, reader, asyncErr, "byreader"); err == nil || !strings.Contains(err.Error(), "Permissions Violation") {
		t.Fatalf("reader's publish of a created event: %v, want a permissions violation", err)
	}

	// The control: the same event from a client that may write (the node's
	// own user) is listed, so the reader's, published first, would be too.
	admin, err := nats.Connect(natsURL, nats.UserInfo(jetstream.AdminUser, creds.Admin), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := fabricated(t, admin, make(chan error), "byadmin"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !listed(t, base, "byadmin") {
		if time.Now().After(deadline) {
			t.Fatal("the control event never showed in /v1/runs")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if listed(t, base, "byreader") {
		t.Fatal("the reader's fabricated run is listed in /v1/runs")
	}

	// node creds prints the reader's line (and the admin's, with a warning).
	var out, errb bytes.Buffer
	if code := dispatch([]string{"creds", "--data", dir, "--nats-listen", strings.TrimPrefix(natsURL, "nats://")}, &out, &errb); code != 0 {
		t.Fatalf("node creds: %d %s", code, errb.String())
	}
	want := "nats --server " + natsURL + " --user reader --password " + creds.Reader
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "WARNING") || !strings.Contains(out.String(), "--user cairn --password "+creds.Admin) {
		t.Fatalf("node creds printed:\n%s\nwant a line with %q", out.String(), want)
	}
}

func TestCredsCommand(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := dispatch([]string{"creds", "--data", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no credentials") {
		t.Fatalf("no file: %d %q", code, errb.String())
	}
	path := credentialsPath(dir)
	if _, err := jetstream.LoadOrCreateCredentials(path); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := dispatch([]string{"creds", "--data", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "nats --server nats://HOST:PORT --user reader --password ") {
		t.Fatalf("creds: %d %s", code, out.String())
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := dispatch([]string{"creds", "--data", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), path) || !strings.Contains(errb.String(), "0644") {
		t.Fatalf("mode 0644: %d %q", code, errb.String())
	}
}

func TestRouteSecretRequired(t *testing.T) {
	t.Setenv(routeSecretEnv, "")
	if _, err := routeSecret(); err == nil || !strings.Contains(err.Error(), routeSecretEnv) {
		t.Fatalf("unset: %v", err)
	}
	t.Setenv(routeSecretEnv, "short")
	if _, err := routeSecret(); err == nil || !strings.Contains(err.Error(), routeSecretEnv) || strings.Contains(err.Error(), "short") {
		t.Fatalf("short: %v (must name the variable, not show the value)", err)
	}
	t.Setenv(routeSecretEnv, "0123456789abcdef")
	if s, err := routeSecret(); err != nil || s != "0123456789abcdef" {
		t.Fatalf("16 bytes: %q %v", s, err)
	}
	// serve refuses to start a clustered embedded server without it.
	t.Setenv(routeSecretEnv, "")
	o := nodeOptions{agentsDir: "../../examples/agents", data: t.TempDir(),
		cluster: clusterOptions{name: "n1", natsCluster: "127.0.0.1:0", listen: "127.0.0.1:0", ttl: 10 * time.Second, embedded: &embedded{}}}
	if _, err := startMember(context.Background(), o, nil); err == nil || !strings.Contains(err.Error(), routeSecretEnv) {
		t.Fatalf("startMember without the secret: %v", err)
	}
}

// With --nats-tls-cert/-key/-ca the embedded server's client port speaks
// TLS only: a client without the CA is refused, the reader with it reads
// the log, and node creds prints the tls:// line with --tlsca. A partial
// TLS configuration stops the node naming the missing flag.
func TestNATSListenTLS(t *testing.T) {
	files := natstest.TLSFiles(t)
	dir := t.TempDir()
	natsAddr := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	servingWith(t, dir, clusterOptions{natsListen: natsAddr, embedded: &embedded{}, tlsCert: files.CertFile, tlsKey: files.KeyFile, tlsCA: files.CAFile})
	creds, err := jetstream.LoadCredentials(credentialsPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect("tls://"+natsAddr, nats.UserInfo(jetstream.ReaderUser, creds.Reader), nats.MaxReconnects(0)); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("a client without the CA: %v", err)
	}
	reader, err := nats.Connect("tls://"+natsAddr, nats.UserInfo(jetstream.ReaderUser, creds.Reader), nats.RootCAs(files.CAFile), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	js, err := njs.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(context.Background(), "CAIRN"); err != nil {
		t.Fatalf("the reader over TLS: %v", err)
	}
	var out, errb bytes.Buffer
	if code := dispatch([]string{"creds", "--data", dir, "--nats-listen", natsAddr, "--nats-tls-ca", files.CAFile}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "nats --server tls://"+natsAddr+" --tlsca "+files.CAFile+" --user reader") {
		t.Fatalf("node creds: %d %s%s", code, out.String(), errb.String())
	}
	if _, err := (clusterOptions{tlsCert: files.CertFile, tlsKey: files.KeyFile}).serverConfig(jetstream.ServerConfig{}); err == nil || !strings.Contains(err.Error(), "--nats-tls-ca") {
		t.Fatalf("TLS without a CA: %v", err)
	}
}
