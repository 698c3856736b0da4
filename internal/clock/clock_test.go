package clock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Timers fire as Advance passes their times, in time order (ties in
// arming order), with Now at each one's time; stopped ones never fire;
// Advance counts what fired.
func TestFakeTimersFireInOrder(t *testing.T) {
	type arm struct {
		name string
		d    time.Duration
		stop bool // stopped before the advance
	}
	tests := []struct {
		name    string
		arms    []arm
		advance []time.Duration
		want    string // name@offset, in firing order
	}{
		{"nothing due", []arm{{"a", time.Hour, false}}, []time.Duration{time.Minute}, ""},
		{"in time order", []arm{{"late", 3 * time.Second, false}, {"early", time.Second, false}, {"mid", 2 * time.Second, false}},
			[]time.Duration{5 * time.Second}, "early@1s mid@2s late@3s"},
		{"ties in arming order", []arm{{"x", time.Second, false}, {"y", time.Second, false}, {"z", time.Second, false}},
			[]time.Duration{time.Second}, "x@1s y@1s z@1s"},
		{"exactly due", []arm{{"a", time.Second, false}}, []time.Duration{999 * time.Millisecond, time.Millisecond}, "a@1s"},
		{"over several advances", []arm{{"a", time.Second, false}, {"b", 3 * time.Second, false}},
			[]time.Duration{2 * time.Second, 2 * time.Second}, "a@1s b@3s"},
		{"stopped never fires", []arm{{"a", time.Second, true}, {"b", 2 * time.Second, false}}, []time.Duration{time.Hour}, "b@2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake(t0)
			var got []string
			for _, a := range tt.arms {
				tm := f.AfterFunc(a.d, func() { got = append(got, fmt.Sprintf("%s@%s", a.name, f.Now().Sub(t0))) })
				if a.stop && !tm.Stop() {
					t.Fatal("Stop of an armed timer = false, want true")
				}
			}
			fired := 0
			for _, d := range tt.advance {
				fired += f.Advance(d) // AfterFunc's functions ran before it returned
			}
			if s := strings.Join(got, " "); s != tt.want {
				t.Fatalf("fired %q, want %q", s, tt.want)
			}
			if fired != len(got) {
				t.Fatalf("Advance counted %d firings, %d functions ran", fired, len(got))
			}
		})
	}
}

// A timer an AfterFunc arms while Advance runs fires in the same Advance
// when it is due by its end, later otherwise.
func TestFakeTimerArmedWhileFiring(t *testing.T) {
	f := NewFake(t0)
	var got []string
	f.AfterFunc(time.Second, func() {
		got = append(got, "first")
		f.AfterFunc(time.Second, func() { got = append(got, "second@"+f.Now().Sub(t0).String()) })
		f.AfterFunc(time.Hour, func() { got = append(got, "third") })
	})
	if n := f.Advance(5 * time.Second); n != 2 || strings.Join(got, " ") != "first second@2s" {
		t.Fatalf("Advance fired %d: %v; want first, second@2s", n, got)
	}
	if f.Armed() != 1 {
		t.Fatalf("%d armed, want the third", f.Armed())
	}
}

// A channel timer: its time on the channel when it fires; Stop and Reset
// report whether it was armed and leave no stale time behind.
func TestFakeTimerChannel(t *testing.T) {
	f := NewFake(t0)
	tm := f.NewTimer(time.Minute)
	f.Advance(time.Minute)
	select {
	case at := <-tm.C():
		if !at.Equal(t0.Add(time.Minute)) {
			t.Fatalf("fired with %s, want t0+1m", at)
		}
	default:
		t.Fatal("a due timer sent nothing")
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer = true")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer = true")
	}
	f.Advance(time.Second) // fired, not received
	if tm.Reset(time.Second) || f.Armed() != 1 {
		t.Fatalf("Reset of a fired timer: %d armed, want it armed again (and false)", f.Armed())
	}
	select {
	case <-tm.C():
		t.Fatal("a stale time after Reset")
	default:
	}
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer = false")
	}
	f.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
}

// A timer armed for d <= 0 is due already and fires at once, as a
// time.Timer does, without an Advance.
func TestFakeDueAtOnce(t *testing.T) {
	f := NewFake(t0)
	for _, d := range []time.Duration{0, -time.Second} {
		if at := <-f.NewTimer(d).C(); !at.Equal(t0) {
			t.Fatalf("NewTimer(%s) sent %s, want t0", d, at)
		}
		done := make(chan struct{})
		f.AfterFunc(d, func() { close(done) })
		<-done // in its own goroutine: the caller may hold a lock it takes
	}
	if f.Armed() != 0 {
		t.Fatalf("%d armed after firing at once", f.Armed())
	}
}

// A ticker fires once a period; ticks its receiver missed are dropped (one
// waits in the channel); Reset changes the period; Stop stops it.
func TestFakeTicker(t *testing.T) {
	f := NewFake(t0)
	k := f.NewTicker(time.Second)
	if n := f.Advance(3500 * time.Millisecond); n != 3 {
		t.Fatalf("ticks in 3.5s: %d, want 3", n)
	}
	if at := <-k.C(); !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("the kept tick is at %s, want the first (t0+1s)", at.Sub(t0))
	}
	select {
	case <-k.C():
		t.Fatal("more than one tick kept")
	default:
	}
	if n := f.Advance(500 * time.Millisecond); n != 1 {
		t.Fatalf("tick at 4s: %d fired", n)
	}
	<-k.C()
	k.Reset(time.Minute)
	if n := f.Advance(59 * time.Second); n != 0 {
		t.Fatalf("%d ticks before the reset period", n)
	}
	if n := f.Advance(time.Second); n != 1 {
		t.Fatalf("%d ticks at the reset period, want 1", n)
	}
	k.Stop()
	if n := f.Advance(time.Hour); n != 0 || f.Armed() != 0 {
		t.Fatalf("a stopped ticker: %d ticks, %d armed", n, f.Armed())
	}
}

// BlockUntil returns once enough timers are armed, and with ctx's error
// when they never are.
func TestFakeBlockUntil(t *testing.T) {
	f := NewFake(t0)
	armed := make(chan struct{})
	go func() {
		f.NewTimer(time.Second)
		f.AfterFunc(time.Second, func() {})
		close(armed)
	}()
	if err := f.BlockUntil(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	<-armed
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.BlockUntil(ctx, 3); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "2 timers armed, waiting for 3") {
		t.Fatalf("BlockUntil(3) with 2 armed = %v, want the context's error and the counts", err)
	}
}

// Concurrent arming, stopping, resetting, reading and advancing (run with
// -race): nothing is left armed once the time passed them all.
func TestFakeConcurrentUse(t *testing.T) {
	f := NewFake(t0)
	var mu sync.Mutex
	fired := 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				tm := f.AfterFunc(time.Duration(1+j%5)*time.Millisecond, func() {
					mu.Lock()
					fired++
					mu.Unlock()
				})
				if (i+j)%7 == 0 {
					tm.Stop()
				} else if (i+j)%11 == 0 {
					tm.Reset(time.Millisecond)
				}
				_ = f.Now()
				f.Advance(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	f.Advance(time.Hour)
	if f.Armed() != 0 {
		t.Fatalf("%d timers still armed after an hour", f.Armed())
	}
	mu.Lock()
	defer mu.Unlock()
	if fired == 0 {
		t.Fatal("no timer fired")
	}
}

// Real is the wall clock: its timers and tickers fire on their own.
func TestReal(t *testing.T) {
	var c Clock = Real{}
	if d := time.Since(c.Now()); d < 0 || d > time.Hour {
		t.Fatalf("Real.Now is %s off", d)
	}
	<-c.NewTimer(0).C()
	done := make(chan struct{})
	c.AfterFunc(0, func() { close(done) })
	<-done
	k := c.NewTicker(time.Millisecond)
	<-k.C()
	k.Reset(time.Millisecond)
	<-k.C()
	k.Stop()
	tm := c.NewTimer(time.Hour)
	if !tm.Stop() || tm.Reset(time.Hour) || !tm.Stop() {
		t.Fatal("Real timer's Stop and Reset do not report whether it was armed")
	}
}
