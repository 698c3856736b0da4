package jetstream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
	"github.com/cairn-agents/cairn/store/storetest"
)

// reopenable is an opener whose store can be replaced after a restart.
type reopenable struct{ s *jetstream.Store }

func (o *reopenable) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	return o.s.Open(ctx, sessionID, runID)
}

var _ storetest.Opener = (*reopenable)(nil)

// The server stops mid-run (parked on children) and starts again on the
// same directory: the run finishes and nothing acknowledged is lost.
func TestServerRestartMidRun(t *testing.T) {
	dir := t.TempDir()
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := srv.Connect()
	o := &reopenable{s: newStore(t, nc, jetstream.Config{})}
	sc := runtimetest.Scenarios()[1] // spawn, wait, get, cancel, complete
	h := runtimetest.NewHost(t, o, sc.Steps...)
	if _, err := h.Attempt(); !errors.Is(err, runtime.ErrWaiting) {
		t.Fatalf("first attempt: %v", err)
	}
	before := h.History()
	nc.Close()
	srv.Shutdown()

	srv2 := natstest.ServerAt(t, dir)
	o.s = newStore(t, natstest.Connect(t, srv2), jetstream.Config{})
	if got := h.History(); fmt.Sprint(ids(got)) != fmt.Sprint(ids(before)) {
		t.Fatalf("after restart history = %v, want %v", ids(got), ids(before))
	}
	if _, err := h.Drive(5, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(h.History()); n != 11 {
		t.Fatalf("final transcript has %d messages: %s", n, runtimetest.Dump(h.History()))
	}
}

func ids(msgs []model.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// TestKill9 runs a writer in a subprocess that commits revisions and prints
// each acknowledged one, kills it with SIGKILL mid-stream, and checks that
// every acknowledged revision is on disk when the server starts again.
func TestKill9(t *testing.T) {
	if os.Getenv("CAIRN_KILL9_CHILD") != "" {
		kill9Child()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$")
	cmd.Env = append(os.Environ(), "CAIRN_KILL9_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := int64(0)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rev, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked, _ = strconv.ParseInt(rev, 10, 64)
			if acked >= 25 {
				break
			}
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < 25 {
		t.Fatalf("child acknowledged only %d revisions before it stopped", acked)
	}
	srv := natstest.ServerAt(t, dir)
	s := newStore(t, natstest.Connect(t, srv), jetstream.Config{})
	h, err := s.Open(context.Background(), "k9", "run")
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.LoadCheckpoint(context.Background())
	if err != nil || got == nil || got.Revision < acked {
		t.Fatalf("after kill -9: checkpoint %+v, %v; %d revisions were acknowledged", got, err, acked)
	}
	if n := len(history(t, h)); int64(n) != got.Revision {
		t.Fatalf("history has %d messages for revision %d", n, got.Revision)
	}
}

func kill9Child() {
	dir := os.Getenv("CAIRN_KILL9_CHILD")
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	nc, _ := srv.Connect()
	s, err := jetstream.New(context.Background(), nc, jetstream.Config{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	h, err := s.Open(context.Background(), "k9", "run")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for rev := int64(1); ; rev++ {
		if err := h.SaveCheckpoint(context.Background(), cp(rev, text(fmt.Sprintf("m%d", rev), "x"))); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("acked", rev)
	}
}
