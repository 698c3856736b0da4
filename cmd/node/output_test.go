package main

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// overlapWriter notes two writes in it at once. It holds the root's last
// progress line ("researcher == completed", printed by the run's goroutine
// after its commit, which the command's Result may see first) until
// another write begins, or holdFor passed: a writer that does not wait
// for the progress lines' lock writes the result then, every time.
type overlapWriter struct {
	hold    string
	holdFor time.Duration

	active  atomic.Int32
	overlap atomic.Bool
	entered chan struct{} // a write began (buffered: the held one looks)

	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *overlapWriter) Write(p []byte) (int, error) {
	if w.active.Add(1) > 1 {
		w.overlap.Store(true)
	}
	defer w.active.Add(-1)
	select {
	case w.entered <- struct{}{}:
	default:
	}
	if strings.Contains(string(p), w.hold) {
		// Drop the signal of this very write, then wait for another.
		select {
		case <-w.entered:
		default:
		}
		select {
		case <-w.entered:
		case <-time.After(w.holdFor): // the writers are serialized: nobody else comes
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *overlapWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// The run command's result and its tree's progress lines (printed from the
// runs' goroutines) share the output: one writes at a time.
func TestRunWritesOneLineAtATime(t *testing.T) {
	w := &overlapWriter{hold: "researcher    == completed\n", holdFor: 3 * time.Second, entered: make(chan struct{}, 1)}
	var errb bytes.Buffer
	if code := runCmd([]string{"--data", t.TempDir(), example, "Is the Great Wall visible from orbit?"}, w, &errb); code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, w.String(), errb.String())
	}
	if w.overlap.Load() {
		t.Fatalf("two writes to the output at once:\n%s", w.String())
	}
	if !strings.Contains(w.String(), "== totals:") {
		t.Fatalf("no result in:\n%s", w.String())
	}
}
