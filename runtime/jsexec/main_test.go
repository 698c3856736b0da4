package jsexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// TestMain lets the test binary serve as its own worker: ModeWorker
// re-executes it with the worker marker set.
func TestMain(m *testing.M) {
	MaybeRunWorker()
	// Every executor, realm, watchdog and worker supervisor is gone when
	// the tests are: a goroutine left behind is a leak.
	goleak.VerifyTestMain(m)
}

// modes are the two executor modes every behavioural test runs against.
var modes = []Mode{ModeInProcess, ModeWorker}

// testGrace is the wait for a stuck realm in tests: generous, since another
// process may be loading the machine.
const testGrace = 5 * time.Second

// newTestFactory returns a factory for mode with lim (zero fields default).
func newTestFactory(t testing.TB, mode Mode, lim Limits) *Factory {
	t.Helper()
	f, err := New(WithMode(mode), WithLimits(lim))
	if err != nil {
		t.Fatal(err)
	}
	f.s.grace = testGrace
	return f
}

// newTestExecutor returns an executor over fake's capabilities, closed at
// the end of the test.
func newTestExecutor(t testing.TB, f *Factory, fk *fake) jstool.Executor {
	t.Helper()
	ex, err := f.NewExecutor(context.Background(), jstool.Config{Capabilities: fk.infos(), Invoke: fk.invoke})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ex.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ex
}

// fakeCall is one Invoke the fake saw.
type fakeCall struct {
	callID, capability string
	seq                int
	args               string
}

// fake is a hand-written InvokeFunc with named behaviours.
type fake struct {
	mu       sync.Mutex
	calls    []fakeCall
	kv       map[string]json.RawMessage
	inFlight int
	maxIn    int
	arrivedN int           // barrier calls so far
	release  chan struct{} // closed when the barrier fills
	barrier  int
	onInvoke func(capability string) // test hook, may be nil
}

// fakeCaps are the names the fake binds.
var fakeCaps = []string{"echo", "math.add", "fail", "hang", "panic", "attach", "barrier", "kv.get", "kv.set"}

func newFake() *fake {
	return &fake{kv: map[string]json.RawMessage{}, release: make(chan struct{})}
}

func (f *fake) infos() []jstool.CapabilityInfo {
	out := make([]jstool.CapabilityInfo, len(fakeCaps))
	for i, n := range fakeCaps {
		out[i] = jstool.CapabilityInfo{Name: n, InputSchema: json.RawMessage(`{"type":"object"}`)}
	}
	return out
}

func (f *fake) seen() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

func (f *fake) maxInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxIn
}

func (f *fake) invoke(ctx context.Context, callID string, seq int, capability string, args json.RawMessage) (jstool.Value, error) {
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{callID: callID, capability: capability, seq: seq, args: string(args)})
	f.inFlight++
	if f.inFlight > f.maxIn {
		f.maxIn = f.inFlight
	}
	hook := f.onInvoke
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if hook != nil {
		hook(capability)
	}
	switch capability {
	case "echo":
		return jstool.Value{JSON: args}, nil
	case "math.add":
		var in struct{ A, B float64 }
		if err := json.Unmarshal(args, &in); err != nil {
			return jstool.Value{}, err
		}
		return jstool.Value{JSON: json.RawMessage(fmt.Sprintf(`{"sum":%v}`, in.A+in.B))}, nil
	case "fail":
		return jstool.Value{}, errors.New("backend says no")
	case "hang":
		<-ctx.Done()
		return jstool.Value{}, ctx.Err()
	case "panic":
		panic("capability exploded with secret sk-PANIC")
	case "attach":
		return jstool.Value{JSON: json.RawMessage(`{"ok":true}`), Attachments: []model.Attachment{{Ref: "blob://1", MediaType: "text/plain", Name: "a.txt", Size: 3}}}, nil
	case "barrier":
		// Returns only once f.barrier calls are in flight together: proof
		// that callbacks run in parallel. A timeout keeps a broken
		// executor from hanging the test.
		f.mu.Lock()
		f.arrivedN++
		if f.arrivedN == f.barrier {
			close(f.release)
		}
		f.mu.Unlock()
		select {
		case <-f.release:
			return jstool.Value{JSON: args}, nil
		case <-time.After(20 * time.Second):
			return jstool.Value{}, errors.New("barrier timed out")
		case <-ctx.Done():
			return jstool.Value{}, ctx.Err()
		}
	case "kv.get":
		var in struct{ Key string }
		_ = json.Unmarshal(args, &in)
		f.mu.Lock()
		defer f.mu.Unlock()
		if v, ok := f.kv[in.Key]; ok {
			return jstool.Value{JSON: v}, nil
		}
		return jstool.Value{JSON: json.RawMessage(`{"value":"from-host"}`)}, nil
	case "kv.set":
		var in struct {
			Key   string
			Value json.RawMessage
		}
		_ = json.Unmarshal(args, &in)
		f.mu.Lock()
		f.kv[in.Key] = in.Value
		f.mu.Unlock()
		return jstool.Value{JSON: json.RawMessage(`true`)}, nil
	}
	return jstool.Value{}, fmt.Errorf("unknown capability %q", capability)
}

// leakCheck fails the test if goroutines or child processes outlive it.
// Call it first, so that its cleanup runs after every other.
func leakCheck(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(20 * time.Second)
		for {
			n := runtime.NumGoroutine()
			kids := children()
			if n <= before && len(kids) == 0 {
				return
			}
			if time.Now().After(deadline) {
				var b bytes.Buffer
				_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
				t.Errorf("leak: %d goroutines before, %d after; child processes %v\n%s", before, n, kids, b.String())
				return
			}
			runtime.Gosched()
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// children lists this process's child processes, zombies included.
func children() []string {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == self {
			out = append(out, fmt.Sprintf("%d(%s)", pid, fields[0]))
		}
	}
	return out
}

// processGone reports whether pid was reaped (no zombie either).
func processGone(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, os.ErrNotExist)
}

// run executes code with a test context.
func run(t *testing.T, ex jstool.Executor, callID, code string) jstool.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := ex.Execute(ctx, jstool.Script{CallID: callID, Code: code})
	if err != nil {
		t.Fatalf("Execute(%q): %v", short(code), err)
	}
	return out
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// jsonEqual compares two JSON texts structurally.
func jsonEqual(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Errorf("result = %s, want %s", gb, wb)
	}
}
