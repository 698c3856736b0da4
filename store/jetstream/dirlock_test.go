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

	"github.com/cairn-agents/cairn/store/jetstream"
)

// holdStore is the helper process of TestStoreDirectoryHeldByAnother: it
// starts a server on the directory CAIRN_TEST_HOLD_STORE names, says
// "held", and waits to be killed.
func holdStore() {
	dir := os.Getenv("CAIRN_TEST_HOLD_STORE")
	if dir == "" {
		return
	}
	if _, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1}); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("held")
	select {}
}

// A second server on a store directory a server of this process runs on is
// refused, naming this process; once the first is closed, it starts.
func TestStoreDirectoryHeldInProcess(t *testing.T) {
	dir := t.TempDir()
	first, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1})
	if !errors.Is(err, jetstream.ErrStoreInUse) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second server on %s: %v; want ErrStoreInUse naming process %d", dir, err, os.Getpid())
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1})
	if err != nil {
		t.Fatalf("a server after the first closed: %v", err)
	}
	if err := again.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A server of another process holds the directory until that process
// dies, kill -9 included (the OS releases the lock: nothing stale stays).
func TestStoreDirectoryHeldByAnother(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CAIRN_TEST_HOLD_STORE="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("helper: %q, %v", line, err)
	}
	_, err = jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1})
	want := fmt.Sprintf("in use by process %d", cmd.Process.Pid)
	if !errors.Is(err, jetstream.ErrStoreInUse) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--nats") {
		t.Fatalf("a server beside another process's: %v; want ErrStoreInUse, %q and what to do", err, want)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	s, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1})
	if err != nil {
		t.Fatalf("a server after the holder was killed: %v", err)
	}
	_ = s.Close(context.Background())
}
