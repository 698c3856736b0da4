package main

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// A node started with another stream name (--stream) works end to end:
// the run completes, the API's run, list, events (SSE) and view read it,
// the reader user reads that stream, replay (--stream) reads it, and no
// stream of the default name exists. Before, the API's event stream,
// replay and the reader's permissions named CAIRN whatever the node wrote.
func TestAnotherStreamName(t *testing.T) {
	const stream = "AGENTLOG"
	dir := t.TempDir()
	natsAddr := "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t))
	o := serveOptions{nodeOptions: nodeOptions{agentsDir: "../../examples/agents", data: dir, stream: stream, logger: slog.New(slog.DiscardHandler),
		cluster: clusterOptions{natsListen: natsAddr, embedded: &embedded{}}},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice"}}
	base, stop := startServe(t, o)

	status, started := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if status != 201 {
		t.Fatalf("start: %d %v", status, started)
	}
	run := started["run_id"].(string)
	if types, _ := sse(t, base, "alice-token", run); len(types) == 0 || types[len(types)-1] != "end" {
		t.Fatalf("events of the run: %v, want its events to the end", types)
	}
	if status, got := call(t, "GET", base+"/v1/runs/"+run, "alice-token", ""); status != 200 || got["status"] != "completed" {
		t.Fatalf("run: %d %v, want completed", status, got)
	}
	if status, got := call(t, "GET", base+"/v1/runs/"+run+"/view", "alice-token", ""); status != 200 || len(got["timeline"].([]any)) == 0 {
		t.Fatalf("view: %d %v, want a timeline", status, got)
	}
	deadline := time.Now().Add(time.Minute) // the index follows the log
	for {
		status, list := call(t, "GET", base+"/v1/runs?status=completed", "alice-token", "")
		if runs, _ := list["runs"].([]any); status == 200 && len(runs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list: %d %v, want the run", status, list)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The reader user reads the configured stream, and the default
	// stream does not exist.
	creds, err := jetstream.LoadCredentials(credentialsPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	reader, err := nats.Connect("nats://"+natsAddr, nats.UserInfo(jetstream.ReaderUser, creds.Reader), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	js, err := njs.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := replay.Load(ctx, replay.Source{JS: js, Stream: stream}, run)
	if err != nil || h.Last() == 0 {
		t.Fatalf("the reader's replay of %s in %s: %v", run, stream, err)
	}
	admin, err := nats.Connect("nats://"+natsAddr, nats.UserInfo(jetstream.AdminUser, creds.Admin), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, err := njs.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.Stream(ctx, events.DefaultStream); !errors.Is(err, njs.ErrStreamNotFound) {
		t.Fatalf("stream %s: %v, want none", events.DefaultStream, err)
	}

	// node replay, once the node stopped, reads the stream it is told
	// (given the node's tokens, which it redacts as the node does).
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CAIRN_TOKENS", "alice=alice-token")
	if out := replayOut(t, 0, "--data", dir, "--stream", stream, run); !strings.Contains(out, "completed") {
		t.Fatalf("replay --stream %s:\n%s", stream, out)
	}
	if out := replayOut(t, 1, "--data", dir, run); !strings.Contains(out, "stream not found") {
		t.Fatalf("replay of the default stream:\n%s", out)
	}
}

// A --stream that JetStream would refuse, or that would widen the
// reader's permissions, is refused at the flag, named.
func TestStreamFlagRefusesBadNames(t *testing.T) {
	for _, bad := range []string{"a.b", "LOG>", "two words"} {
		var out, errb strings.Builder
		if code := replayCmd([]string{"--stream", bad, "r1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-stream") || !strings.Contains(errb.String(), "not a stream name") {
			t.Fatalf("replay --stream %q: exit %d\n%s", bad, code, errb.String())
		}
	}
}
