package jsexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// workerEnv marks a process started as a worker. The parent starts workers
// with this variable and nothing else in their environment, so no host
// credential reaches them.
const workerEnv = "CAIRN_JSEXEC_WORKER"

// addrSpaceFactor times MemoryBytes is the worker's address-space headroom
// over its idle size: room for the heap watchdog's threshold, the garbage
// collector's slack and its overshoot, while one allocation of several
// times the limit fails at once.
const addrSpaceFactor = 4

// MaybeRunWorker turns the process into a jsexec worker when it was started
// as one, and never returns in that case; otherwise it returns at once.
// Every binary that ModeWorker runs (by default the current executable)
// must call it first thing in main, and in TestMain for tests:
//
//	func main() {
//		jsexec.MaybeRunWorker()
//		...
//	}
func MaybeRunWorker() {
	if os.Getenv(workerEnv) != "1" {
		return
	}
	os.Exit(runWorker())
}

// workerState routes frames from the reader to the running script.
type workerState struct {
	mu      sync.Mutex
	id      uint64
	results chan callResult
	cancel  context.CancelFunc
	done    chan struct{}
}

func (st *workerState) begin(id uint64, results chan callResult, cancel context.CancelFunc) {
	st.mu.Lock()
	st.id, st.results, st.cancel, st.done = id, results, cancel, make(chan struct{})
	st.mu.Unlock()
}

func (st *workerState) end() {
	st.mu.Lock()
	close(st.done)
	st.id, st.results, st.cancel, st.done = 0, nil, nil, nil
	st.mu.Unlock()
}

func (st *workerState) deliver(f *frame) {
	st.mu.Lock()
	results, done, ok := st.results, st.done, st.id == f.ID && st.results != nil
	st.mu.Unlock()
	if !ok {
		return
	}
	select {
	case results <- callResult{seq: f.Seq, value: f.Value, failed: f.Failed, err: f.Error}:
	case <-done:
	}
}

func (st *workerState) cancelIf(id uint64) {
	st.mu.Lock()
	if st.cancel != nil && (id == 0 || st.id == id) {
		st.cancel()
	}
	st.mu.Unlock()
}

// runWorker serves the protocol on stdin and stdout and returns the exit
// code.
func runWorker() int {
	out, err := protocolOut()
	if err != nil {
		fmt.Fprintln(os.Stderr, "jsexec worker:", err)
		return 3
	}
	in := bufio.NewReader(os.Stdin)
	init, err := readFrame(in, 1<<20)
	if err != nil || init.T != frameInit || init.Limits == nil {
		fmt.Fprintln(os.Stderr, "jsexec worker: bad init frame:", err)
		return 3
	}
	lim := init.Limits.withDefaults()

	// The Go collector works harder as the heap nears the limit, so the
	// address-space ceiling is reached by runaway allocations, not garbage.
	debug.SetMemoryLimit(lim.MemoryBytes + lim.MemoryBytes/2)
	ready := &frame{T: frameReady, PID: os.Getpid()}
	idle, limit, lerr := limitAddressSpace(uint64(lim.MemoryBytes) * addrSpaceFactor)
	ready.AddrIdle, ready.AddrLimit = idle, limit
	if lerr != nil {
		ready.LimitError = lerr.Error()
	}
	r, err := newRealm(init.Caps, lim, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jsexec worker:", err)
		return 3
	}
	if err := writeFrame(out, ready); err != nil {
		return 3
	}

	st := &workerState{}
	execs := make(chan *frame, 1)
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		max := workerMaxFrame(lim)
		for {
			f, err := readFrame(in, max)
			if err != nil {
				if err != io.EOF {
					fmt.Fprintln(os.Stderr, "jsexec worker: read:", err)
				}
				st.cancelIf(0)
				return
			}
			switch f.T {
			case frameExec:
				select {
				case execs <- f:
				default:
					fmt.Fprintln(os.Stderr, "jsexec worker: exec while busy")
					st.cancelIf(0)
					return
				}
			case frameCBResult:
				st.deliver(f)
			case frameCancel:
				st.cancelIf(f.ID)
			}
		}
	}()

	for {
		select {
		case <-eof:
			return 0
		case f := <-execs:
			ctx, cancel := context.WithCancel(context.Background())
			results := make(chan callResult, lim.MaxPendingCallbacks)
			st.begin(f.ID, results, cancel)
			id := f.ID
			io := runIO{
				dispatch: func(seq int, capability string, args json.RawMessage) error {
					return writeFrame(out, &frame{T: frameCallback, ID: id, Seq: seq, Capability: capability, Args: args})
				},
				results: fixed(results),
			}
			o, rerr := r.run(ctx, jstool.Script{CallID: f.CallID, Code: string(f.Code)}, io)
			st.end()
			cancel()
			reset := r.broken
			if reset {
				// The old realm's heap goes before the next script's
				// watchdog, which bounds this whole process's heap, reads it.
				r = nil
				runtime.GC()
				if r, err = newRealm(init.Caps, lim, true); err != nil {
					fmt.Fprintln(os.Stderr, "jsexec worker:", err)
					return 3
				}
			}
			if err := writeFrame(out, &frame{T: frameResult, ID: id, Outcome: toWire(o), Cancelled: rerr != nil, Reset: reset}); err != nil {
				return 3
			}
		}
	}
}
