package jsexec

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// pool is a factory's worker processes (ModeWorker). Executors hold no
// worker: each Execute leases one for its script alone and hands it back
// when the script ends, so a run waiting on its model, a child or a timer
// holds none, and the number of workers is bounded by settings.workers
// whatever the number of runs. A script that finds every worker busy
// waits for one, first come first served, for as long as its context
// allows.
//
// Nothing passes from one run to another through a worker: each script
// gets a realm of its own (built fresh, dropped at its end), and a worker
// whose realm broke (a limit, a timeout, an interruption mid-JavaScript,
// an engine panic), that died, that broke the protocol, that was killed
// past a deadline or by Close, or that ran settings.workerScripts scripts,
// is killed and reaped before its slot serves anyone else. Workers that
// wait for a script are kept while any executor of the factory is open,
// and stopped when the last one closes: a factory whose executors are all
// closed holds no process.
//
// The bound is strict: a slot counts its worker from before the start
// until after the reaping, so the processes alive, zombies included,
// never outnumber the slots.
type pool struct {
	s *settings // the factory's

	mu sync.Mutex
	// live is the slots in use: a worker idle, leased, starting or being
	// killed, or a slot granted to a waiter that has not started its
	// worker yet.
	live int
	// idle are the workers waiting for a script, the most recently used
	// last (taken first: its pages are warm).
	idle []*proc
	// waiters are the callers waiting for a slot, in order. A grant sends
	// a worker, or nil for an empty slot the receiver starts a worker in.
	waiters []chan *proc
	// open is the number of open executors.
	open int

	// onWait and onStart, set only by tests (under mu), run when a caller
	// begins to wait and when a worker has started for a caller.
	onWait  func()
	onStart func(pid int)
}

func newPool(s *settings) *pool { return &pool{s: s} }

// acquire leases a worker for one script: an idle one, a new one in a free
// slot, or the first one handed back while the caller waits. It fails when
// ctx ends first (wrapping its cause) or a worker cannot start (ErrWorker).
func (pl *pool) acquire(ctx context.Context) (*proc, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jsexec: wait for a worker: %w", context.Cause(ctx))
	}
	pl.mu.Lock()
	onWait, onStart := pl.onWait, pl.onStart
	var p *proc
	switch {
	case len(pl.idle) > 0:
		p = pl.idle[len(pl.idle)-1]
		pl.idle = pl.idle[:len(pl.idle)-1]
		pl.mu.Unlock()
	case pl.live < pl.s.workers:
		pl.live++
		pl.mu.Unlock()
	default:
		w := make(chan *proc, 1)
		pl.waiters = append(pl.waiters, w)
		pl.mu.Unlock()
		if onWait != nil {
			onWait()
		}
		select {
		case p = <-w:
		case <-ctx.Done():
			pl.mu.Lock()
			if i := slices.Index(pl.waiters, w); i >= 0 {
				pl.waiters = slices.Delete(pl.waiters, i, i+1)
				pl.mu.Unlock()
			} else {
				// Granted as ctx ended: pass the slot on.
				pl.mu.Unlock()
				pl.put(<-w)
			}
			return nil, fmt.Errorf("jsexec: wait for a worker: %w", context.Cause(ctx))
		}
	}
	if p != nil {
		select {
		case <-p.exited:
			// It died while idle (killed from outside): the script about
			// to run is not to blame.
			pl.s.log.Warn("jsexec: idle worker died", "pid", p.pid, "note", p.deathNote())
			p.kill()
			p = nil
		default:
		}
	}
	if p == nil {
		np, err := startProc(ctx, *pl.s)
		if err != nil {
			pl.put(nil)
			return nil, err
		}
		p = np
		if onStart != nil {
			onStart(p.pid)
		}
	}
	p.clearStderr()
	return p, nil
}

// release hands back a worker acquire leased. keep says the script ended
// with the worker fit for another run's script; otherwise, or when it has
// run its share of scripts, it is killed and reaped first.
func (pl *pool) release(p *proc, keep bool) {
	if !keep || p.scripts >= pl.s.workerScripts {
		p.kill()
		p = nil
	}
	pl.put(p)
}

// put gives back a slot: with p, a live worker fit for a script, or
// empty. The first waiter gets it; otherwise p waits idle, or the slot is
// freed.
func (pl *pool) put(p *proc) {
	pl.mu.Lock()
	if len(pl.waiters) > 0 {
		w := pl.waiters[0]
		pl.waiters = pl.waiters[1:]
		pl.mu.Unlock()
		w <- p // buffered, and only ever sent to once
		return
	}
	if p != nil && pl.open > 0 {
		pl.idle = append(pl.idle, p)
		pl.mu.Unlock()
		return
	}
	pl.mu.Unlock()
	if p != nil {
		p.kill() // no executor is open to use it
	}
	pl.mu.Lock()
	pl.live--
	pl.mu.Unlock()
}

// opened counts an executor that was opened.
func (pl *pool) opened() {
	pl.mu.Lock()
	pl.open++
	pl.mu.Unlock()
}

// closed counts an executor that was closed (after its last script). When
// it was the last open one, the idle workers are stopped.
func (pl *pool) closed() {
	pl.mu.Lock()
	pl.open--
	var stop []*proc
	if pl.open == 0 {
		stop, pl.idle = pl.idle, nil
	}
	pl.mu.Unlock()
	for _, p := range stop {
		p.kill()
		pl.put(nil)
	}
}

// poolStats is the pool's accounting, for tests.
type poolStats struct {
	live, idle, waiting, open int
}

func (pl *pool) stats() poolStats {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return poolStats{live: pl.live, idle: len(pl.idle), waiting: len(pl.waiters), open: pl.open}
}
