// Package jsexec is the JavaScript executor behind the run_js tool: a
// jstool.Factory on github.com/dop251/goja. Each executor is scoped to one
// attempt of one run, and runs each of its scripts in a realm of its own,
// built for that script and dropped at its end. A script is the body of
// an async function; it calls the host only through the capabilities
// bound under a frozen `caps` object, and its returned value comes back as
// JSON with its console output and the attachments its callbacks returned.
//
// # A minimal program
//
//	func main() {
//		jsexec.MaybeRunWorker() // first thing: this binary is also the worker
//		factory, err := jsexec.New()
//		...
//		ex, err := factory.NewExecutor(ctx, jstool.Config{Capabilities: infos, Invoke: invoker.Invoke})
//		...
//		defer ex.Close()
//		out, err := ex.Execute(ctx, jstool.Script{CallID: id, Code: `return (await caps.kv.get({key: "a"})).value`})
//
// The caller's duties:
//
//  1. Call MaybeRunWorker first thing in main (and in TestMain of any test
//     binary that uses ModeWorker). The worker is this binary re-executed
//     with a marker in its environment; without the call the re-executed
//     binary would run the node instead of a worker (Execute then fails with
//     ErrWorker after a handshake timeout).
//  2. Pass the canonical invoker (jstool.Invoker) as Config.Invoke: it
//     validates arguments, authorizes through the host, redacts results and
//     records attribution. The executor calls Config.Invoke for every
//     callback and nothing else.
//  3. Create the executor lazily, on the first run_js of an attempt, and
//     Close it on every exit (C41). Close is idempotent; Execute after Close
//     returns ErrClosed. The factory keeps idle workers while any of its
//     executors is open and stops them when the last one closes, so a
//     factory needs no closing of its own.
//  4. Treat an error from Execute as an interrupted script (its callbacks
//     may have taken effect, C20); a script that throws, times out or trips a
//     limit is an Outcome with Failure set, a tool error (C21, C22).
//
// # Scripts
//
// The code is compiled as `(async function () {` + code + `\n})` and called,
// so `await` and `return` work. The result is the returned value as JSON
// (undefined, a function or a symbol give null); a value that cannot be
// serialized (a cycle, a BigInt, nesting deeper than 1,000) is an
// "exception" failure. The JSON is written as JSON.stringify writes it,
// but by a walker in Go that reads only what the value itself holds
// (tojson.go): toJSON counts only as an own property of a value (one on a
// prototype, even a class's, is ignored), an array's missing element is
// null whatever its prototypes hold, and Dates and Number, String and
// Boolean objects are read through the original builtins. So a script that
// pollutes Object.prototype, Array.prototype or Date.prototype cannot
// change how the values it returns or sends to the host are written. The
// script ends when its promise has settled and no callback is pending, so
// callbacks that were started but not awaited still complete (and count). A
// script that awaits a promise nothing can settle fails at once instead of
// waiting for its timeout; an unhandled promise rejection fails the script.
// Positions in messages are those of the code as written.
//
// Each script runs in a fresh realm: nothing a script leaves in the realm
// (globals, changed builtins, pending work) reaches the next script, of the
// same attempt or of another run. A script that needs a value from an
// earlier one gets it from that script's result (which the model has) or
// from the host's resources. The heap is never checkpointed and scripts
// are never replayed (C42). In ModeWorker a realm lives in a worker only
// while its script runs, so an attempt waiting on its model, a child or a
// timer holds no worker.
//
// A script can leave goja's VM broken when it is interrupted (part of its
// call stack stays behind, after which no promise job runs again, and every
// value the script held stays reachable). No realm runs a second script
// anyway; in ModeWorker the worker itself is replaced after a script that
// timed out or tripped a limit while it ran (memory, call stack,
// callbacks, pending callbacks, console output; not the source, result and
// log bounds, which stop nothing), after a script cancelled while running
// JavaScript (one cancelled while waiting for a callback hands its worker
// back), after an engine panic, and when the worker died or was killed, so
// that nothing such a script left in the process (a heap grown to its
// limit) meets another run's script. A worker that ran a script that
// ended normally collects what the script left (when it is more than 1/16
// of MemoryBytes) before it takes the next, and is replaced when its
// address space grew more than MemoryBytes past its idle size (Go keeps
// the address space its heap once took, and the address-space limit
// counts it), so that every script has at least 3/4 of a fresh worker's
// headroom.
//
// # Bindings
//
// Only Config.Capabilities are bound (C4). Each is an async function of one
// argument under `caps`, dotted names nesting (`kv.get` is caps.kv.get).
// The argument is serialized by the same walker as the result (see Scripts;
// no argument means {}, and one that cannot be serialized rejects the call's
// promise); the promise resolves with the parsed JSON of
// Value.JSON, or rejects with an Error whose message is the invoker's error
// text (a panic in Invoke becomes "caps.<name>: internal error in the host";
// the panic value goes to the logger only, as it bypassed redaction).
// Invoke runs off the VM goroutine; results are applied on the VM goroutine
// by an event loop inside Execute. Callback sequence numbers start at 1 per
// script. The caps tree is null-prototype and frozen, the `caps` global
// non-writable and non-configurable, and the host only ever calls builtins
// it captured before any script ran, so overwriting caps.kv.get,
// Object.prototype (toJSON included), JSON or Error changes nothing outside
// the realm.
// console.log, info, warn and error are captured.
//
// # No ambient authority
//
// A realm has only ECMAScript builtins, `console` and `caps`: no require,
// import, process, fetch or other network, filesystem, environment, or
// timers (setTimeout, setInterval, queueMicrotask do not exist, so nothing
// can outlive a script). eval and Function exist but compile code in the
// same realm, with the same bindings and no more. A worker process starts
// with an empty environment (only the worker marker), inherits no open file
// of the host, and has no core dumps. Date and Math.random are the
// builtins': scripts are not deterministic, and need not be, since they are
// never replayed.
//
// # Modes
//
// ModeWorker (the default) runs each script's realm in a worker process
// leased from the factory's pool for that script alone, spoken to over
// stdin/stdout with length-prefixed JSON frames (see protocol.go). The
// pool holds at most WithWorkers processes (default DefaultWorkers(),
// twice GOMAXPROCS and at least 4), whatever the number of runs: a script
// that finds them all busy waits for one, first come first served, as long
// as its context allows; workers start on demand, serve the scripts of
// many runs one at a time, and are replaced after DefaultWorkerScripts
// scripts (see pool.go).
//
// It is the default because goja has no memory limit: a watchdog can
// interrupt allocation loops, but one builtin allocation such as
// "x".repeat(2**31-1) or new Array(2**32-1).fill(0) either succeeds at
// gigabytes or kills the whole process with Go's "fatal error: out of
// memory", which no recover catches.
// In a worker such a script kills only the worker, under an address-space
// limit (RLIMIT_AS, set by the worker on itself at start; Linux): Execute
// reports a "limit" failure ("memory limit exceeded ... the JavaScript
// worker ran out of memory") and the pool starts a fresh worker for the
// next script. The same holds for a script stuck in a builtin that
// Interrupt cannot reach (a backtracking regular expression): past the
// deadline the worker is killed.
// Workers are always reaped, die with the parent (PDEATHSIG) and run in a
// process group of their own (Linux), so a terminal's Ctrl-C reaches the host only
// (which cancels the script and stops the worker itself). A worker that
// dies mid-script without evidence of memory exhaustion is an "exception"
// failure that says how it died: "the JavaScript worker was killed by
// signal SIGINT from outside Cairn", "... crashed with signal ...",
// "... exited unexpectedly ...", never a guessed limit. A worker
// costs ~6 ms to start (once per DefaultWorkerScripts scripts while the
// factory has an open executor), ~180 us per trivial script back to back
// (~90 us when a realm was kept between scripts: building a fresh one,
// ~60 us of goja's builtins, is most of the difference), and ~100 us per
// callback round trip (bench_test.go; BenchmarkAttempts compares the pool
// with a worker per attempt).
//
// ModeInProcess runs the realm in the calling process: ~100 us per trivial
// script (~7 us when a realm was kept between scripts) and ~15 us per
// callback, but its memory watchdog bounds the growth of the whole
// process's heap and cannot stop a single huge allocation, and a script
// stuck in a builtin keeps a goroutine busy after Execute has returned
// (the realm is abandoned to it). Use it for trusted scripts, tests and
// benchmarks.
//
// # Limits
//
// Each limit is a field of Limits (zero means the default); tripping one is
// a Failure of kind "timeout" or "limit", never a crash, and a worker whose
// script tripped one while it ran is replaced (see Scripts):
//
//	Timeout              30 s     wall clock per script, awaited callbacks included
//	MaxCallStackSize     5,000    frames
//	MaxCallbacks         1,000    capability calls per script
//	MaxPendingCallbacks  32       capability calls in flight at once
//	MaxSourceBytes       128 KiB  script source
//	MaxResultBytes       1 MiB    returned JSON (and each callback argument)
//	MaxLogLines          200      console lines kept (the rest counted in LogsDropped)
//	MaxLogBytes          64 KiB   console bytes kept
//	MaxConsoleBytes      4 MiB    console output written; past it the script fails
//	MemoryBytes          256 MiB  heap (watchdog); worker address space = idle + 4x
//
// A script's time limit starts when a worker takes it, not while it waits
// for one.
//
// The watchdog polls the heap every 2 ms, so a loop may overshoot the memory
// limit before it is stopped. A context that ends interrupts the script;
// Execute then returns an error wrapping ctx's cause. If the realm does not
// stop within a grace period (2 s) it is abandoned (in process) or killed
// (worker).
package jsexec
