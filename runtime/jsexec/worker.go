package jsexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
// code. A worker serves the scripts of many runs, one at a time, each in a
// realm built for it alone: the next script's realm is built ahead (see
// spare; its capabilities come with the script), and dropped when the
// script ends. So that another run's script finds the worker as it
// started, the worker collects what a large script left before it waits
// again (the heap watchdog bounds this whole process's heap), and asks to
// be retired when its address space has grown past its idle size plus
// MemoryBytes (Go keeps the address space its heap once took, and the
// address-space limit counts it: the next script would be killed short of
// the headroom a fresh worker gives).
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
	addr := openAddrMeter()
	realms := newSpare(lim, true)
	if err := writeFrame(out, ready); err != nil {
		return 3
	}
	// base is the heap between scripts: what a script leaves above it
	// beyond a little slack is collected before the next script.
	base := heapBytes()

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
			r, err := realms.take(f.Caps)
			if err != nil {
				fmt.Fprintln(os.Stderr, "jsexec worker:", err)
				return 3
			}
			o, rerr, retire := runExec(r, f, lim, out, st)
			r = nil
			if size := addr.size(); idle > 0 && size > idle+uint64(lim.MemoryBytes) {
				retire = true
			}
			if err := writeFrame(out, &frame{T: frameResult, ID: f.ID, Outcome: toWire(o), Cancelled: rerr != nil, Retire: retire}); err != nil {
				return 3
			}
			if !retire { // a retired worker is killed by the parent
				settle(base, lim)
			}
		}
	}
}

// heapSlack is how far past its base the heap may be left between
// scripts: garbage the next script's watchdog counts, up to 1/16 of the
// limit.
func heapSlack(lim Limits) uint64 { return uint64(lim.MemoryBytes / 16) }

// settle runs between a worker's scripts, once the realm of the one that
// ended is garbage: when the heap is more than heapSlack past base, it
// collects it (and returns its pages), so that another run's script is
// not measured against the limit with what this one left.
func settle(base uint64, lim Limits) {
	if heapBytes() > base+heapSlack(lim) {
		debug.FreeOSMemory()
	}
}

// runExec runs the script of an exec frame in r. broken says r broke (a
// worker whose realm broke is not given another script).
func runExec(r *realm, f *frame, lim Limits, out io.Writer, st *workerState) (o jstool.Outcome, rerr error, broken bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan callResult, lim.MaxPendingCallbacks)
	st.begin(f.ID, results, cancel)
	defer st.end()
	id := f.ID
	rio := runIO{
		dispatch: func(seq int, capability string, args json.RawMessage) error {
			return writeFrame(out, &frame{T: frameCallback, ID: id, Seq: seq, Capability: capability, Args: args})
		},
		results: fixed(results),
	}
	o, rerr = r.run(ctx, jstool.Script{CallID: f.CallID, Code: string(f.Code)}, rio)
	return o, rerr, r.broken
}
