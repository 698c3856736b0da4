package jetstream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
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
	_ = srv.Close(context.Background())

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

// TestKill9 runs writers in a subprocess that commit revisions and print
// each acknowledged one, kills it with SIGKILL mid-stream, and checks that
// every acknowledged revision is on disk when the server starts again, and
// that every run's log is whole: as many commits as its last revision (no
// partial batch, nothing twice). With many writers in batch mode the kill
// lands while atomic batches are in flight.
func TestKill9(t *testing.T) {
	if dir := os.Getenv("CAIRN_KILL9_CHILD"); dir != "" {
		kill9Child(dir, os.Getenv("CAIRN_KILL9_MODE"))
		return
	}
	for _, tc := range []struct {
		mode    jetstream.CommitMode
		writers int
	}{{jetstream.CommitSingle, 1}, {jetstream.CommitAdaptive, 1}, {jetstream.CommitBatch, kill9Writers}} {
		t.Run(string(tc.mode), func(t *testing.T) { kill9(t, tc.mode, tc.writers) })
	}
}

const kill9Writers = 32

func kill9(t *testing.T, mode jetstream.CommitMode, writers int) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9$")
	cmd.Env = append(os.Environ(), "CAIRN_KILL9_CHILD="+dir, "CAIRN_KILL9_MODE="+string(mode))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := make([]int64, writers)
	total := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() && total < 25*writers {
		var w int
		var rev int64
		if _, err := fmt.Sscanf(sc.Text(), "acked %d %d", &w, &rev); err == nil && w < writers {
			acked[w] = max(acked[w], rev)
			total++
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if total < 25*writers {
		t.Fatalf("child acknowledged only %d commits before it stopped", total)
	}
	srv := natstest.ServerAt(t, dir)
	s := newStore(t, natstest.Connect(t, srv), jetstream.Config{GroupCommit: jetstream.GroupCommit{Mode: mode}})
	for w := 0; w < writers; w++ {
		h, err := s.Open(context.Background(), fmt.Sprintf("k9-%d", w), "run")
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.LoadCheckpoint(context.Background())
		if err == nil && got == nil && acked[w] == 0 {
			got = &runtime.Checkpoint{} // a writer the kill caught before its first acknowledgement
		}
		if err != nil || got == nil || got.Revision < acked[w] {
			t.Fatalf("writer %d after kill -9: checkpoint %+v, %v; revision %d was acknowledged", w, got, err, acked[w])
		}
		if n := len(history(t, h)); int64(n) != got.Revision {
			t.Fatalf("writer %d: history has %d messages for revision %d", w, n, got.Revision)
		}
	}
}

func kill9Child(dir, mode string) {
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir})
	if err != nil {
		fail(err)
	}
	nc, _ := srv.Connect()
	s, err := jetstream.New(context.Background(), nc, jetstream.Config{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitMode(mode)}})
	if err != nil {
		fail(err)
	}
	writers := 1
	if mode == string(jetstream.CommitBatch) {
		writers = kill9Writers
	}
	var mu sync.Mutex
	for w := 0; w < writers; w++ {
		h, err := s.Open(context.Background(), fmt.Sprintf("k9-%d", w), "run")
		if err != nil {
			fail(err)
		}
		go func() {
			for rev := int64(1); ; rev++ {
				if err := h.SaveCheckpoint(context.Background(), cp(rev, text(fmt.Sprintf("m%d", rev), "x"))); err != nil {
					fail(err)
				}
				mu.Lock()
				fmt.Println("acked", w, rev)
				mu.Unlock()
			}
		}()
	}
	select {}
}
