// Package clock is the time a component reads and waits on, injected so
// that tests drive it: Real is the wall clock; Fake moves only when a test
// advances it, and fires the timers and tickers that come due then.
package clock

import "time"

// Clock tells the time and makes timers and tickers on it.
type Clock interface {
	Now() time.Time
	// NewTimer sends the time on the timer's channel once d has passed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed; the
	// timer's channel is nil.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTicker sends the time on its channel every d (d > 0); a tick the
	// receiver is not ready for is dropped, as with time.Ticker.
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop and Reset report whether the timer was still armed; neither
	// leaves a stale time in the channel (Go 1.23's time.Timer rules).
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real is the wall clock (package time).
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }
