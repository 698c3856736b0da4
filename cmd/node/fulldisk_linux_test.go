package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// A node whose data disk fills under load is not ready at once, saying
// which stream failed to store a write (the first the disk refused: the
// log's, a bucket's) and why. Before, /readyz answered
// 200 {"ready":true} for some 15 s after the log's writes began to fail
// (until serve gave up on its server's health and exited): the embedded
// server answers a publish its disk refused with nothing, and the probe's
// few bytes still fitted on the disk. Needs a tmpfs of its own (root, or
// CAP_SYS_ADMIN); skipped where the machine does not allow one, as
// store/jetstream's full-disk tests.
func TestReadyzFollowsAFullDisk(t *testing.T) {
	dir := natstest.Tmpfs(t, "32m")
	base := serving(t, filepath.Join(dir, "data"))
	if body := until(t, base, http.StatusOK); body["ready"] != true {
		t.Fatalf("/readyz body %v, want ready true", body)
	}

	// Load: runs started one after another, each writing the log as it
	// goes, until the test ends.
	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Add(1)
	started := make(chan struct{}, 1)
	client := &http.Client{Timeout: 2 * time.Second} // a start the full disk holds is left
	go func() {
		defer load.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("POST", base+"/v1/runs", strings.NewReader(`{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer alice-token")
			resp, err := client.Do(req)
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				select {
				case started <- struct{}{}:
				default:
				}
			}
		}
	}()
	defer func() { close(stop); load.Wait() }()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("no run started in a minute")
	}

	if err := fill(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	filled := time.Now()
	// The first write that fails comes right after: runs keep writing. A
	// generous bound, far below the 15 s of 200s before.
	deadline := filled.Add(5 * time.Second)
	for {
		status, _, body := request(t, "GET", base+"/readyz", "", "")
		if status == http.StatusServiceUnavailable {
			reason, _ := body["reason"].(string)
			if !strings.Contains(reason, "failed to store a write to stream") || !strings.Contains(reason, "no space left on device") {
				t.Fatalf("/readyz 503 %v, want the reason: a stream failed to store a write, no space left on device", body)
			}
			t.Logf("not ready %s after the disk filled: %s", time.Since(filled), reason)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %v %s after the disk filled under load", status, body, time.Since(filled))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fill writes path until its file system has no space left.
func fill(path string) error {
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
