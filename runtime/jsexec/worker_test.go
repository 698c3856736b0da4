package jsexec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// TestWorkerDeathRestarts: a single allocation past the address-space
// limit kills the worker (Go's "fatal error: out of memory", which no
// recover catches); the script fails with a memory limit failure, the dead
// worker is reaped, and the next script runs in a fresh worker.
func TestWorkerDeathRestarts(t *testing.T) {
	leakCheck(t)
	ex := newTestExecutor(t, newTestFactory(t, ModeWorker, Limits{}), newFake())
	w := ex.(*workerExecutor)
	checkStep(t, run(t, ex, "g", `return 1`), step{want: `1`})
	first := w.pid()
	out := run(t, ex, "bomb", `return "x".repeat(2**31 - 1).length`)
	checkStep(t, out, step{kind: "limit", says: []string{"memory limit exceeded", "ran out of memory"}})
	if !processGone(first) {
		t.Errorf("dead worker %d not reaped", first)
	}
	checkStep(t, run(t, ex, "after", `return 2`), step{want: `2`})
	if second := w.pid(); second == first || second == 0 {
		t.Errorf("worker pid %d after restart, was %d", second, first)
	}
}

// TestWorkerKilledMidScript: a worker killed from outside while its script
// awaits a callback ends the script with a failure that names the signal
// and does not blame a limit; the callback's context is cancelled and the
// executor goes on.
func TestWorkerKilledMidScript(t *testing.T) {
	leakCheck(t)
	fk := newFake()
	ex := newTestExecutor(t, newTestFactory(t, ModeWorker, Limits{}), fk)
	w := ex.(*workerExecutor)
	fk.onInvoke = func(capability string) {
		if capability == "hang" {
			_ = syscall.Kill(w.pid(), syscall.SIGKILL)
		}
	}
	out := run(t, ex, "k", `await caps.echo({}); await caps.hang({}); return 1`)
	checkStep(t, out, step{kind: "exception", says: []string{"the JavaScript worker was killed by signal SIGKILL from outside Cairn"}})
	if strings.Contains(out.Failure.Message, "resource limit") {
		t.Errorf("failure message %q blames a resource limit", out.Failure.Message)
	}
	checkStep(t, run(t, ex, "after", `return 2`), step{want: `2`})
}

// TestWorkerHasItsOwnProcessGroup: a worker is not in the host's process
// group, so a terminal's Ctrl-C (SIGINT to the foreground group) reaches
// the host only.
func TestWorkerHasItsOwnProcessGroup(t *testing.T) {
	leakCheck(t)
	ex := newTestExecutor(t, newTestFactory(t, ModeWorker, Limits{}), newFake())
	run(t, ex, "up", `return 0`)
	pid := ex.(*workerExecutor).pid()
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	own, err := syscall.Getpgid(0)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == own {
		t.Errorf("worker %d is in the host's process group %d", pid, own)
	}
	if pgid != pid {
		t.Errorf("worker %d is in process group %d, want its own", pid, pgid)
	}
}

// TestWorkerInterruptedFromOutside: a worker killed by a SIGINT that Cairn
// did not send, while its script spins, fails the script with a message
// that names the signal and its origin and does not blame memory or a
// resource limit; the next script runs in a fresh worker.
func TestWorkerInterruptedFromOutside(t *testing.T) {
	leakCheck(t)
	ex := newTestExecutor(t, newTestFactory(t, ModeWorker, Limits{}), newFake())
	w := ex.(*workerExecutor)
	run(t, ex, "up", `return 0`)
	pid := w.pid()
	sent := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		sent <- syscall.Kill(pid, syscall.SIGINT)
	}()
	out := run(t, ex, "spin", `for (;;) {}`)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	checkStep(t, out, step{kind: "exception", says: []string{"the JavaScript worker was killed by signal SIGINT from outside Cairn"}})
	for _, s := range []string{"resource limit", "memory"} {
		if strings.Contains(out.Failure.Message, s) {
			t.Errorf("failure message %q says %q", out.Failure.Message, s)
		}
	}
	checkStep(t, run(t, ex, "after", `return 2`), step{want: `2`})
	if w.pid() == pid {
		t.Errorf("worker %d not replaced", pid)
	}
}

// TestWorkerHasNoAmbientAuthority (C42): a worker gets none of the host's
// environment or open files, and runs under an address-space limit.
func TestWorkerHasNoAmbientAuthority(t *testing.T) {
	leakCheck(t)
	t.Setenv("CAIRN_TEST_SECRET", "hunter2")
	hostFile, err := os.Create(filepath.Join(t.TempDir(), "host-secret.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer hostFile.Close()
	ex := newTestExecutor(t, newTestFactory(t, ModeWorker, Limits{MemoryBytes: 128 << 20}), newFake())
	run(t, ex, "up", `return 0`)
	pid := strconv.Itoa(ex.(*workerExecutor).pid())

	env, err := os.ReadFile("/proc/" + pid + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	if strings.Join(got, " ") != workerEnv+"=1 GOTRACEBACK=none" {
		t.Errorf("worker environment %q", got)
	}
	if bytes.Contains(env, []byte("hunter2")) {
		t.Error("a host secret reached the worker's environment")
	}

	fds, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		target, _ := os.Readlink("/proc/" + pid + "/fd/" + fd.Name())
		if strings.Contains(target, "host-secret") {
			t.Errorf("worker holds the host's file as fd %s", fd.Name())
		}
	}

	limits, err := os.ReadFile("/proc/" + pid + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(line, "Max address space") && strings.Contains(line, "unlimited") {
			t.Errorf("no address-space limit: %q", line)
		}
	}
}

// TestWorkerStartFailure: a binary that does not speak the protocol is an
// ErrWorker from Execute, not a hang, and leaves no process behind.
func TestWorkerStartFailure(t *testing.T) {
	for _, path := range []string{"/bin/true", "/bin/cat", "/nonexistent/jsexec-worker"} {
		t.Run(path, func(t *testing.T) {
			leakCheck(t)
			f, err := New(WithMode(ModeWorker), WithWorkerPath(path))
			if err != nil {
				t.Fatal(err)
			}
			f.s.startTimeout = 5 * time.Second
			ex, err := f.NewExecutor(t.Context(), jstool.Config{Invoke: newFake().invoke})
			if err != nil {
				t.Fatal(err)
			}
			defer ex.Close()
			if _, err := ex.Execute(t.Context(), jstool.Script{Code: `return 1`}); !errors.Is(err, ErrWorker) {
				t.Errorf("Execute: %v, want ErrWorker", err)
			}
		})
	}
}

// TestFrames: the protocol's framing round-trips and refuses oversize
// frames.
func TestFrames(t *testing.T) {
	var b bytes.Buffer
	in := &frame{T: frameExec, ID: 7, CallID: "c", Code: []byte("return \xff\"x\"")}
	if err := writeFrame(&b, in); err != nil {
		t.Fatal(err)
	}
	raw := append([]byte(nil), b.Bytes()...)
	out, err := readFrame(&b, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if out.T != in.T || out.ID != in.ID || out.CallID != in.CallID || !bytes.Equal(out.Code, in.Code) {
		t.Errorf("round trip %+v", out)
	}
	if _, err := readFrame(bytes.NewReader(raw), 10); err == nil {
		t.Error("oversize frame accepted")
	}
	if _, err := readFrame(bytes.NewReader(raw[:len(raw)-1]), 1<<10); err == nil {
		t.Error("short frame accepted")
	}
}

// TestWorkerDiedWhileIdle: a worker killed while it waits in the pool is
// replaced before the next script, which runs normally.
func TestWorkerDiedWhileIdle(t *testing.T) {
	leakCheck(t)
	ex := newTestExecutor(t, newTestFactory(t, ModeWorker, Limits{}), newFake())
	w := ex.(*workerExecutor)
	run(t, ex, "g", `return 0`)
	pid := w.pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Wait until the parent has reaped it (its waiter goroutine does).
	for deadline := time.Now().Add(20 * time.Second); !processGone(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("worker %d not reaped", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	checkStep(t, run(t, ex, "after", `return 1`), step{want: `1`})
	if w.pid() == pid {
		t.Errorf("the dead worker %d ran the next script", pid)
	}
}
