package jsexec

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"
)

// Mode says where an executor's realm lives.
type Mode int

const (
	// ModeWorker runs each script's realm in a worker subprocess (the
	// current binary re-executed, see MaybeRunWorker) under an OS address
	// space limit, spoken to over pipes; a bounded pool of workers serves
	// every executor of the factory (WithWorkers). It is the default: it
	// is the only mode that survives a script allocating without bound.
	ModeWorker Mode = iota
	// ModeInProcess runs the realm in the calling process. It is faster but
	// cannot bound memory (see the package documentation): use it for trusted
	// scripts, tests and benchmarks.
	ModeInProcess
)

// String returns "worker" or "in-process".
func (m Mode) String() string {
	switch m {
	case ModeWorker:
		return "worker"
	case ModeInProcess:
		return "in-process"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// Limits bound one script of one executor. A zero field takes its default
// (DefaultLimits); a negative one is an error.
type Limits struct {
	// Timeout is the wall-clock time a script may take, awaited callbacks
	// included. Default 30s.
	Timeout time.Duration
	// MaxCallStackSize is the JavaScript call stack depth, in frames.
	// Default 5,000. (goja unwinds an overflow through builtins, such as
	// recursion through toString or getters, in time quadratic in the depth:
	// ~0.75 s at 5,000 frames, ~3 s at 10,000.)
	MaxCallStackSize int
	// MaxCallbacks is the number of capability calls one script may make.
	// Default 1,000.
	MaxCallbacks int
	// MaxPendingCallbacks is the number of capability calls that may be in
	// flight at once. Default 32.
	MaxPendingCallbacks int
	// MaxSourceBytes is the size of a script's code, in bytes. Default 128 KiB.
	MaxSourceBytes int
	// MaxResultBytes is the size of the returned value's JSON, in bytes. It
	// also bounds the JSON of each callback argument (a larger argument
	// rejects that call's promise). Default 1 MiB.
	MaxResultBytes int
	// MaxLogLines is the number of console lines kept in Outcome.Logs; later
	// lines are dropped and counted in Outcome.LogsDropped. Default 200.
	MaxLogLines int
	// MaxLogBytes is the number of console bytes kept in Outcome.Logs; the
	// line that crosses it is truncated, later lines are dropped and
	// counted. Default 64 KiB.
	MaxLogBytes int
	// MaxConsoleBytes is the total console output a script may write, kept
	// or not; past it the script fails with a limit failure. Default 4 MiB.
	MaxConsoleBytes int
	// MemoryBytes bounds the JavaScript heap. In ModeWorker it is the worker
	// process's heap (a watchdog interrupts the script past it; a worker
	// runs one script at a time) and sets the worker's address-space limit
	// (its idle size plus 4 x MemoryBytes), which stops single huge
	// allocations by killing the worker. In
	// ModeInProcess it is the growth of the whole process's heap during the
	// script, checked by the same watchdog, which cannot stop a single huge
	// builtin allocation. Default 256 MiB.
	MemoryBytes int64
}

// Defaults of Limits.
const (
	DefaultTimeout             = 30 * time.Second
	DefaultMaxCallStackSize    = 5_000
	DefaultMaxCallbacks        = 1_000
	DefaultMaxPendingCallbacks = 32
	DefaultMaxSourceBytes      = 128 << 10
	DefaultMaxResultBytes      = 1 << 20
	DefaultMaxLogLines         = 200
	DefaultMaxLogBytes         = 64 << 10
	DefaultMaxConsoleBytes     = 4 << 20
	DefaultMemoryBytes         = 256 << 20
)

// DefaultLimits returns the limits a zero Limits stands for.
func DefaultLimits() Limits {
	return Limits{
		Timeout:             DefaultTimeout,
		MaxCallStackSize:    DefaultMaxCallStackSize,
		MaxCallbacks:        DefaultMaxCallbacks,
		MaxPendingCallbacks: DefaultMaxPendingCallbacks,
		MaxSourceBytes:      DefaultMaxSourceBytes,
		MaxResultBytes:      DefaultMaxResultBytes,
		MaxLogLines:         DefaultMaxLogLines,
		MaxLogBytes:         DefaultMaxLogBytes,
		MaxConsoleBytes:     DefaultMaxConsoleBytes,
		MemoryBytes:         DefaultMemoryBytes,
	}
}

// Validate reports a negative field.
func (l Limits) Validate() error {
	var errs []error
	neg := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("jsexec: limits: %s is negative (%d)", name, v))
		}
	}
	neg("Timeout", int64(l.Timeout))
	neg("MaxCallStackSize", int64(l.MaxCallStackSize))
	neg("MaxCallbacks", int64(l.MaxCallbacks))
	neg("MaxPendingCallbacks", int64(l.MaxPendingCallbacks))
	neg("MaxSourceBytes", int64(l.MaxSourceBytes))
	neg("MaxResultBytes", int64(l.MaxResultBytes))
	neg("MaxLogLines", int64(l.MaxLogLines))
	neg("MaxLogBytes", int64(l.MaxLogBytes))
	neg("MaxConsoleBytes", int64(l.MaxConsoleBytes))
	neg("MemoryBytes", l.MemoryBytes)
	return errors.Join(errs...)
}

// withDefaults fills zero fields.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Timeout == 0 {
		l.Timeout = d.Timeout
	}
	if l.MaxCallStackSize == 0 {
		l.MaxCallStackSize = d.MaxCallStackSize
	}
	if l.MaxCallbacks == 0 {
		l.MaxCallbacks = d.MaxCallbacks
	}
	if l.MaxPendingCallbacks == 0 {
		l.MaxPendingCallbacks = d.MaxPendingCallbacks
	}
	if l.MaxSourceBytes == 0 {
		l.MaxSourceBytes = d.MaxSourceBytes
	}
	if l.MaxResultBytes == 0 {
		l.MaxResultBytes = d.MaxResultBytes
	}
	if l.MaxLogLines == 0 {
		l.MaxLogLines = d.MaxLogLines
	}
	if l.MaxLogBytes == 0 {
		l.MaxLogBytes = d.MaxLogBytes
	}
	if l.MaxConsoleBytes == 0 {
		l.MaxConsoleBytes = d.MaxConsoleBytes
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	return l
}

// settings is what the options build.
type settings struct {
	mode       Mode
	limits     Limits
	workerPath string
	log        *slog.Logger
	// grace is how long past a deadline or a cancellation the host waits
	// for the realm to stop by itself before it discards the realm (in
	// process) or kills the worker.
	grace time.Duration
	// startTimeout bounds a worker's start and handshake.
	startTimeout time.Duration
	// workers bounds the worker processes alive at once (ModeWorker).
	workers int
	// workerScripts is how many scripts a worker runs before it is
	// replaced.
	workerScripts int
}

// DefaultWorkerScripts is how many scripts a worker runs before the pool
// replaces it: a bound on what any slow leak of the engine can gather. A
// worker starts in ~6 ms, ~6 us a script spread over this many.
const DefaultWorkerScripts = 1000

// DefaultWorkers returns the default bound on worker processes: twice the
// CPUs the Go runtime uses (GOMAXPROCS), and at least 4. A worker holds
// its slot while a script runs, including while the script awaits its
// capability calls, so more workers than CPUs keep scripts that wait on
// slow backends from holding up the others; each worker costs its idle
// size (~15 MB resident) and up to its memory limit while a script
// allocates.
func DefaultWorkers() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// defaultGrace is settings.grace unless a test shortens it.
const defaultGrace = 2 * time.Second

// Option configures New.
type Option func(*settings) error

// WithMode selects where realms live. Default ModeWorker.
func WithMode(m Mode) Option {
	return func(s *settings) error {
		if m != ModeWorker && m != ModeInProcess {
			return fmt.Errorf("jsexec: unknown mode %d", int(m))
		}
		s.mode = m
		return nil
	}
}

// WithLimits sets the per-script limits; zero fields keep their defaults.
func WithLimits(l Limits) Option {
	return func(s *settings) error {
		if err := l.Validate(); err != nil {
			return err
		}
		s.limits = l.withDefaults()
		return nil
	}
}

// WithWorkerPath sets the binary ModeWorker runs as a worker. Its main must
// call MaybeRunWorker first thing. Default: the current executable
// (os.Executable).
func WithWorkerPath(path string) Option {
	return func(s *settings) error {
		if path == "" {
			return errors.New("jsexec: empty worker path")
		}
		s.workerPath = path
		return nil
	}
}

// WithLogger receives what cannot reach the script: a capability's panic
// value, a dead worker's last output. Default: discarded.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return errors.New("jsexec: nil logger")
		}
		s.log = l
		return nil
	}
}

// WithWorkers bounds the worker processes alive at once in ModeWorker,
// whatever the number of executors: a script that finds every worker busy
// waits for one (as long as its context allows) rather than starting
// another. Zero means DefaultWorkers() (so a flag's zero value can be
// passed as is); a negative n is an error.
func WithWorkers(n int) Option {
	return func(s *settings) error {
		switch {
		case n < 0:
			return fmt.Errorf("jsexec: %d workers: the bound cannot be negative", n)
		case n == 0:
			s.workers = DefaultWorkers()
		default:
			s.workers = n
		}
		return nil
	}
}

func defaultSettings() settings {
	return settings{
		mode:          ModeWorker,
		limits:        DefaultLimits(),
		log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		grace:         defaultGrace,
		startTimeout:  10 * time.Second,
		workers:       DefaultWorkers(),
		workerScripts: DefaultWorkerScripts,
	}
}
