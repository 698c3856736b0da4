package jsexec

import (
	"context"
	"sync"
)

// gate is the lifecycle both executors share: Execute runs one script at a
// time, and Close can interrupt a running script without waiting for it,
// then waits for it to end before releasing what the executor holds.
type gate struct {
	// cmu guards closed and cancelRun, so Close can interrupt a running
	// Execute without waiting for mu.
	cmu       sync.Mutex
	closed    bool
	cancelRun context.CancelCauseFunc

	// mu serializes Execute and the end of Close; it guards the executor's
	// realm or worker.
	mu sync.Mutex
}

// enter starts an Execute: it holds mu until the returned exit is called
// and registers the script's cancel so Close can interrupt it. It fails
// with ErrClosed after Close.
func (g *gate) enter(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	ectx, cancel := context.WithCancelCause(ctx)
	g.cmu.Lock()
	if g.closed {
		g.cmu.Unlock()
		cancel(nil)
		g.mu.Unlock()
		return nil, nil, ErrClosed
	}
	g.cancelRun = cancel
	g.cmu.Unlock()
	return ectx, func() {
		g.cmu.Lock()
		g.cancelRun = nil
		g.cmu.Unlock()
		cancel(nil)
		g.mu.Unlock()
	}, nil
}

// close marks the gate closed, interrupts a running Execute, then runs
// release once that Execute has ended. A second close does nothing.
func (g *gate) close(release func()) {
	g.cmu.Lock()
	if g.closed {
		g.cmu.Unlock()
		return
	}
	g.closed = true
	if g.cancelRun != nil {
		g.cancelRun(ErrClosed)
	}
	g.cmu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	release()
}
