// Package leakcheck fails a test binary when a goroutine of Cairn's own
// outlives its tests. It is go.uber.org/goleak for the packages that run
// protoactor-go: protoactor leaves goroutines of its own behind by design
// (its actor system has no way to stop some of them), so goleak, which
// counts every goroutine, cannot be used there. leakcheck counts only the
// goroutines that run or were started by code of a watched module (Cairn's,
// and nats.go's and nats-server's, whose connections and servers a test
// must close), and ignores the rest.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Modules are the import-path prefixes whose goroutines must not outlive
// the tests: a goroutine is a leak when a frame of its stack, or the
// statement that created it, is in one of them.
var Modules = []string{
	"github.com/cairn-agents/cairn/",
	"github.com/nats-io/",
}

// settle is how long Main waits for goroutines to end after the tests
// (a closed connection's readers, an actor finishing its last message).
const settle = 20 * time.Second

// Main runs the tests of m and then, when they passed, fails the binary if
// a watched goroutine is still there once settle has passed, printing
// each one's stack. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaks := Wait(settle); len(leaks) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: %d goroutine(s) outlived the tests:\n\n%s\n", len(leaks), strings.Join(leaks, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Wait returns the stacks of the watched goroutines other than the
// caller's, polling until there are none or d has passed.
func Wait(d time.Duration) []string {
	deadline := time.Now().Add(d)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		leaks := Find()
		if len(leaks) == 0 || time.Now().After(deadline) {
			return leaks
		}
		time.Sleep(delay) // polling: a goroutine's end is no event one can wait on
	}
}

// Find returns the stacks of the watched goroutines running now, other
// than the caller's.
func Find() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var leaks []string
	// runtime.Stack(all) puts the caller's goroutine first; each
	// goroutine is a paragraph.
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue
		}
		if Watched(string(g)) {
			leaks = append(leaks, string(g))
		}
	}
	return leaks
}

// Watched reports whether a goroutine's stack (one paragraph of
// runtime.Stack) has a frame in, or was created by, a watched module.
// Frames' function lines are the odd lines after the header; file lines
// start with a tab and name the file, not the package, so only function
// lines and the "created by" line are read.
func Watched(stack string) bool {
	for _, line := range strings.Split(stack, "\n") {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "goroutine ") {
			continue
		}
		fn := strings.TrimPrefix(line, "created by ")
		for _, p := range Modules {
			if strings.HasPrefix(fn, p) && !strings.HasPrefix(fn, "github.com/cairn-agents/cairn/internal/leakcheck.") {
				return true
			}
		}
	}
	return false
}
