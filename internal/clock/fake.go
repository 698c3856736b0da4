package clock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Fake is a Clock that moves only when Advance moves it. Its timers and
// tickers fire as Advance passes their times, in time order (ties in the
// order they were armed), each with Now at its own time; an AfterFunc's
// function runs in Advance's goroutine, before Advance returns, so a test
// sees its effects at once. A timer armed for d <= 0 fires at once, as a
// time.Timer does (an AfterFunc's function in its own goroutine then: its
// caller may hold a lock the function takes). Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	armed   map[*fakeTimer]struct{}
	seq     uint64
	changed chan struct{} // closed and replaced when the armed set changes
}

var (
	_ Clock = (*Fake)(nil)
	_ Clock = Real{}
)

// NewFake returns a Fake whose time is start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, armed: map[*fakeTimer]struct{}{}, changed: make(chan struct{})}
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker") // as time.NewTicker
	}
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	t.reset(d, d)
	return fakeTicker{t}
}

// Advance moves the time d forward, firing every timer and ticker due by
// then (timers its AfterFunc functions arm included, when due by then),
// and returns how many fired (a ticker counts once per tick).
func (f *Fake) Advance(d time.Duration) int {
	f.mu.Lock()
	target := f.now.Add(d)
	fired := 0
	for {
		t := f.nextLocked(target)
		if t == nil {
			break
		}
		if t.at.After(f.now) {
			f.now = t.at
		}
		if t.period > 0 {
			t.at = t.at.Add(t.period)
			f.seq++
			t.seq = f.seq
		} else {
			f.disarmLocked(t)
		}
		fired++
		if t.fn != nil {
			fn := t.fn
			f.mu.Unlock()
			fn()
			f.mu.Lock()
			continue
		}
		select {
		case t.ch <- f.now:
		default: // a tick the receiver is not ready for is dropped
		}
	}
	if target.After(f.now) {
		f.now = target
	}
	f.mu.Unlock()
	return fired
}

// Armed is the number of timers and tickers armed.
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.armed)
}

// BlockUntil returns once at least n timers and tickers are armed, or
// with ctx's error: a test waits there for the code under test to arm what
// it then advances past, instead of sleeping.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		armed, changed := len(f.armed), f.changed
		f.mu.Unlock()
		if armed >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("clock: %d timers armed, waiting for %d: %w", armed, n, ctx.Err())
		}
	}
}

// nextLocked is the armed timer due first by target, or nil.
func (f *Fake) nextLocked(target time.Time) *fakeTimer {
	var next *fakeTimer
	for t := range f.armed {
		if t.at.After(target) {
			continue
		}
		if next == nil || t.at.Before(next.at) || (t.at.Equal(next.at) && t.seq < next.seq) {
			next = t
		}
	}
	return next
}

func (f *Fake) disarmLocked(t *fakeTimer) bool {
	if _, ok := f.armed[t]; !ok {
		return false
	}
	delete(f.armed, t)
	f.changedLocked()
	return true
}

func (f *Fake) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// fakeTimer is a timer (fn or ch) or, with a period, a ticker (ch).
type fakeTimer struct {
	f      *Fake
	at     time.Time
	seq    uint64
	period time.Duration
	ch     chan time.Time
	fn     func()
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.drain()
	return t.f.disarmLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	return t.reset(d, 0)
}

func (t *fakeTimer) reset(d, period time.Duration) bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	t.drain()
	_, was := f.armed[t]
	t.period = period
	if d <= 0 && period == 0 { // due already: fires at once
		delete(f.armed, t)
		if was {
			f.changedLocked()
		}
		if t.fn != nil {
			go t.fn()
		} else {
			t.ch <- f.now // drained above: never blocks
		}
		return was
	}
	t.at = f.now.Add(d)
	f.seq++
	t.seq = f.seq
	f.armed[t] = struct{}{}
	f.changedLocked()
	return was
}

// drain empties the channel: no stale time after Stop or Reset.
func (t *fakeTimer) drain() {
	if t.ch == nil {
		return
	}
	select {
	case <-t.ch:
	default:
	}
}

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.ch }
func (k fakeTicker) Stop()               { k.t.Stop() }

func (k fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset") // as time.Ticker
	}
	k.t.reset(d, d)
}
