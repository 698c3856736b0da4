package jsexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// ErrClosed is returned by Execute after Close, and by an Execute that Close
// interrupted.
var ErrClosed = errors.New("jsexec: executor closed")

// ErrWorker is the class of worker failures that are not the script's doing:
// the worker binary cannot start or does not answer (does its main call
// MaybeRunWorker?), or it broke the protocol.
var ErrWorker = errors.New("jsexec: worker failed")

// Factory allocates executors. In ModeWorker it owns the pool of worker
// processes its executors' scripts run in (see WithWorkers); the pool
// keeps workers only while an executor is open, so a factory whose
// executors are all closed holds no process and needs no closing.
type Factory struct {
	s    settings
	pool *pool // ModeWorker only
}

var _ jstool.Factory = (*Factory)(nil)

// New returns a Factory. Without options it runs realms in at most
// DefaultWorkers() worker subprocesses of the current executable with
// DefaultLimits.
func New(opts ...Option) (*Factory, error) {
	s := defaultSettings()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&s); err != nil {
			return nil, err
		}
	}
	if s.mode == ModeWorker && s.workerPath == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("jsexec: worker path: %w", err)
		}
		s.workerPath = p
	}
	f := &Factory{s: s}
	if s.mode == ModeWorker {
		f.pool = newPool(&f.s)
	}
	return f, nil
}

// Mode reports where the factory's realms live.
func (f *Factory) Mode() Mode { return f.s.mode }

// Limits reports the per-script limits, defaults filled in.
func (f *Factory) Limits() Limits { return f.s.limits }

// Workers reports the bound on worker processes (ModeWorker).
func (f *Factory) Workers() int { return f.s.workers }

// NewExecutor returns an executor bound to cfg.Capabilities that calls
// cfg.Invoke for every callback. It is cheap: it builds no realm and holds
// no worker (each script gets a fresh realm, and in ModeWorker a worker
// only while it runs). It fails when ctx has ended,
// cfg has no Invoke, or a capability name is empty, has an empty dotted
// segment, is repeated, or is both a function and a namespace ("kv" and
// "kv.get").
//
// The executor's Execute returns a Go error only when the script was
// interrupted from outside or the executor cannot run it: ErrClosed after
// (or during) Close, an error wrapping ctx's cause when ctx ended the script
// (the Outcome then has a "cancelled" failure and what was logged), and
// ErrWorker when a worker cannot start or breaks the protocol. A script
// that throws, times out, trips a limit or kills its worker is an Outcome
// with Failure set and a nil error. In ModeWorker a script that finds
// every worker busy waits for one; ctx ending the wait is an interruption
// like any other. Close is idempotent and returns nil.
func (f *Factory) NewExecutor(ctx context.Context, cfg jstool.Config) (ex jstool.Executor, err error) {
	defer func() {
		if x := recover(); x != nil {
			ex, err = nil, fmt.Errorf("jsexec: new executor: internal error: %v", x)
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jsexec: new executor: %w", err)
	}
	if cfg.Invoke == nil {
		return nil, errors.New("jsexec: new executor: Config.Invoke is nil")
	}
	names, err := capabilityNames(cfg.Capabilities)
	if err != nil {
		return nil, err
	}
	switch f.s.mode {
	case ModeInProcess:
		return newInProcess(f.s, names, cfg.Invoke), nil
	default:
		return newWorkerExecutor(f.s, f.pool, names, cfg.Invoke), nil
	}
}

// capabilityNames validates and sorts the bound names.
func capabilityNames(caps []jstool.CapabilityInfo) ([]string, error) {
	names := make([]string, 0, len(caps))
	seen := make(map[string]bool, len(caps))
	for _, c := range caps {
		if c.Name == "" {
			return nil, errors.New("jsexec: capability with an empty name")
		}
		for _, seg := range strings.Split(c.Name, ".") {
			if seg == "" {
				return nil, fmt.Errorf("jsexec: capability %q has an empty name segment", c.Name)
			}
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("jsexec: capability %q bound twice", c.Name)
		}
		seen[c.Name] = true
		names = append(names, c.Name)
	}
	for _, n := range names {
		for i := strings.IndexByte(n, '.'); i >= 0; i = nextDot(n, i) {
			if seen[n[:i]] {
				return nil, fmt.Errorf("jsexec: capability %q is also a namespace of %q", n[:i], n)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// nextDot returns the index of the next '.' in s after i, or -1.
func nextDot(s string, i int) int {
	j := strings.IndexByte(s[i+1:], '.')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}
