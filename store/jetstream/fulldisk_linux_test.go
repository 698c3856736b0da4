package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream"
)

// An embedded server started while its disk is full stores again once the
// space returns. Before, the server took 75% of the free space at its start
// as its storage limit for good: every write was refused as "insufficient
// resources" after the space came back, and the node (truthfully not ready)
// never recovered (the chaos long run, one node, three seeds of five). Needs
// a tmpfs of its own (root, or CAP_SYS_ADMIN); skipped where the machine
// does not allow one.
func TestServerStartedOnAFullDiskStoresOnceSpaceReturns(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0700"); err != nil {
		t.Skipf("a tmpfs cannot be mounted here (%v): the full disk is not reproduced", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	store := filepath.Join(dir, "data")
	ctx := context.Background()
	publish := func(srv *jetstream.Server, what string) error {
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := njs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateOrUpdateStream(ctx, njs.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, Storage: njs.FileStorage}); err != nil {
			return fmt.Errorf("%s: stream: %w", what, err)
		}
		if _, err := js.Publish(ctx, "full.x", make([]byte, 1024)); err != nil {
			return fmt.Errorf("%s: publish: %w", what, err)
		}
		return nil
	}
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(srv, "on an empty disk"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(dir, "filler")
	if err := fillUp(filler); err != nil {
		t.Fatal(err)
	}
	srv, err = jetstream.StartServer(jetstream.ServerConfig{StoreDir: store})
	if err != nil {
		t.Fatalf("start on a full disk: %v", err)
	}
	defer srv.Close(ctx)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := publish(srv, "once the space is back"); err != nil {
		t.Fatalf("the server started on a full disk does not store after the space returned: %v", err)
	}
}

// fillUp writes path until its file system has no space left.
func fillUp(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4 << 10, 512} {
		chunk := make([]byte, size)
		for {
			if _, err := f.Write(chunk); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				return err
			}
		}
	}
	return nil
}
