package jsexec

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// stderrHead is how much of a worker's stderr is kept to explain its death:
// the Go runtime says why it died first ("fatal error: out of memory").
const stderrHead = 4 << 10

// proc is one running worker process, seen from the parent. Three
// goroutines serve it (the waiter, the frame reader, the stderr reader);
// all three end once the process exits, and kill waits for them.
type proc struct {
	cmd *exec.Cmd
	pid int

	in  *os.File // the worker's stdin
	out *os.File // the worker's protocol output

	frames     chan *frame   // frames read; closed on the first read error
	quit       chan struct{} // closed by kill: stop delivering frames
	readerDone chan struct{}

	exited  chan struct{} // closed once the process is reaped
	waitErr error         // written before exited is closed

	stderrMu   sync.Mutex
	stderr     []byte
	stderrDone chan struct{}

	killOnce   sync.Once
	hostKilled bool // kill signalled it before it exited; written in killOnce
	ready      *frame

	// Written by the worker's leaseholder only (see pool).
	nextID  uint64 // the last script ID sent: IDs are unique over its life
	scripts int    // scripts sent
}

// startProc starts a worker and completes the handshake.
func startProc(ctx context.Context, s settings) (*proc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: pipe: %w", ErrWorker, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("%w: pipe: %w", ErrWorker, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("%w: pipe: %w", ErrWorker, err)
	}
	cmd := exec.Command(s.workerPath)
	// Nothing of the host's environment: no credential reaches a worker.
	// A fatal error prints its reason without goroutine dumps.
	cmd.Env = []string{workerEnv + "=1", "GOTRACEBACK=none"}
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = workerSysProcAttr()
	p := &proc{
		cmd:        cmd,
		in:         inW,
		out:        outR,
		frames:     make(chan *frame),
		quit:       make(chan struct{}),
		readerDone: make(chan struct{}),
		exited:     make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	started := make(chan error, 1)
	go p.wait(started)
	err = <-started
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("%w: start %s: %w", ErrWorker, s.workerPath, err)
	}
	p.pid = cmd.Process.Pid
	go p.readFrames(parentMaxFrame(s.limits))
	go p.readStderr(errR)

	lim := s.limits
	if err := p.send(&frame{T: frameInit, Limits: &lim}, time.Now().Add(s.startTimeout)); err != nil {
		p.kill()
		return nil, fmt.Errorf("%w: %w", ErrWorker, err)
	}
	timer := time.NewTimer(s.startTimeout)
	defer timer.Stop()
	select {
	case f, ok := <-p.frames:
		if !ok || f.T != frameReady {
			p.kill()
			return nil, fmt.Errorf("%w: no handshake from %s (does its main call jsexec.MaybeRunWorker?): %s", ErrWorker, s.workerPath, p.deathNote())
		}
		p.ready = f
		if f.LimitError != "" {
			s.log.Warn("jsexec: worker runs without an address-space limit", "pid", p.pid, "error", f.LimitError)
		}
		return p, nil
	case <-timer.C:
		p.kill()
		return nil, fmt.Errorf("%w: no handshake from %s within %s (does its main call jsexec.MaybeRunWorker?)", ErrWorker, s.workerPath, s.startTimeout)
	case <-ctx.Done():
		p.kill()
		return nil, fmt.Errorf("jsexec: start worker: %w", context.Cause(ctx))
	}
}

// wait starts the process and reaps it, on a goroutine locked to its thread
// for the worker's whole life (see workerSysProcAttr).
func (p *proc) wait(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	p.waitErr = p.cmd.Wait()
	close(p.exited)
}

// readFrames forwards frames until the pipe ends or kill.
func (p *proc) readFrames(max int) {
	defer close(p.readerDone)
	defer close(p.frames)
	r := bufio.NewReader(p.out)
	for {
		f, err := readFrame(r, max)
		if err != nil {
			if err != io.EOF && !errors.Is(err, os.ErrClosed) {
				p.noteStderr("jsexec parent: " + err.Error())
			}
			return
		}
		select {
		case p.frames <- f:
		case <-p.quit:
			return
		}
	}
}

// readStderr keeps the head of the worker's stderr and drains the rest.
func (p *proc) readStderr(r *os.File) {
	defer close(p.stderrDone)
	defer r.Close()
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.stderrMu.Lock()
			if room := stderrHead - len(p.stderr); room > 0 {
				p.stderr = append(p.stderr, buf[:min(n, room)]...)
			}
			p.stderrMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// clearStderr forgets what the worker printed before: a worker that
// serves many scripts explains a death by what it printed during the
// script that died.
func (p *proc) clearStderr() {
	p.stderrMu.Lock()
	p.stderr = p.stderr[:0]
	p.stderrMu.Unlock()
}

func (p *proc) noteStderr(s string) {
	p.stderrMu.Lock()
	if len(p.stderr) < stderrHead {
		p.stderr = append(p.stderr, s...)
		p.stderr = append(p.stderr, '\n')
	}
	p.stderrMu.Unlock()
}

// send writes a frame, giving up at deadline.
func (p *proc) send(f *frame, deadline time.Time) error {
	if err := p.in.SetWriteDeadline(deadline); err != nil {
		return err
	}
	return writeFrame(p.in, f)
}

// kill stops the process and waits until it is reaped and every goroutine
// serving it has ended. It is idempotent.
func (p *proc) kill() {
	p.killOnce.Do(func() {
		close(p.quit)
		if p.cmd.Process != nil {
			select {
			case <-p.exited:
			default:
				// A SIGKILL that ends the process is then the host's own.
				p.hostKilled = p.cmd.Process.Kill() == nil
			}
		}
		<-p.exited
		p.in.Close()
		p.out.Close()
		<-p.readerDone
		<-p.stderrDone
	})
}

// dead waits a little for a process whose pipe ended to exit, then makes
// sure it is gone.
func (p *proc) dead(grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	}
	p.kill()
}

// deathNote describes how the process ended: exit status and the first
// line of its stderr that says why. Call after kill or dead.
func (p *proc) deathNote() string {
	status := "still running"
	select {
	case <-p.exited:
		status = "exited"
		if p.waitErr != nil {
			status = p.waitErr.Error()
		}
	default:
	}
	p.stderrMu.Lock()
	tail := string(p.stderr)
	p.stderrMu.Unlock()
	for _, line := range strings.Split(tail, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "fatal error:") || strings.HasPrefix(line, "runtime:") || strings.HasPrefix(line, "panic:") ||
			strings.HasPrefix(line, "jsexec") || strings.Contains(line, "ERROR: ThreadSanitizer") {
			return status + ": " + truncate(line, 200)
		}
	}
	return status
}

// oomSigns are what a worker prints when an allocation hits its address
// space limit: the Go runtime ("fatal error: out of memory", "runtime: out
// of memory: cannot allocate ...") and, in a -race build, the race
// runtime ("ThreadSanitizer failed to allocate ...", "too many address
// space collisions for -race mode").
var oomSigns = []string{"out of memory", "cannot allocate memory", "failed to allocate", "address space"}

// outOfMemory reports whether the dead process's stderr says it ran out of
// memory.
func (p *proc) outOfMemory() bool {
	p.stderrMu.Lock()
	defer p.stderrMu.Unlock()
	for _, s := range oomSigns {
		if bytes.Contains(p.stderr, []byte(s)) {
			return true
		}
	}
	return false
}

// deathFailure says why a worker died mid-script, from the evidence the
// host has, and never guesses at memory without it: the worker's stderr
// saying it ran out of memory (its address-space limit), the host having
// killed it itself, or the signal that ended it. Call after kill or dead.
func (p *proc) deathFailure(memoryBytes int64) *jstool.Failure {
	note := p.deathNote()
	if p.outOfMemory() {
		return &jstool.Failure{Kind: "limit", Message: fmt.Sprintf("memory limit exceeded (%d MiB): the JavaScript worker ran out of memory and was stopped (%s)", memoryBytes>>20, note)}
	}
	var msg string
	sig, fault := exitSignal(p.cmd.ProcessState)
	switch {
	case p.hostKilled && (sig == "SIGKILL" || sig == ""): // "": no signal known (not Linux)
		msg = fmt.Sprintf("the JavaScript worker stopped answering mid-script and Cairn killed it (%s)", note)
	case sig != "" && fault:
		msg = fmt.Sprintf("the JavaScript worker crashed with signal %s (%s)", sig, note)
	case sig == "SIGKILL":
		msg = fmt.Sprintf("the JavaScript worker was killed by signal SIGKILL from outside Cairn (%s; the kernel's out-of-memory killer also sends SIGKILL)", note)
	case sig != "":
		msg = fmt.Sprintf("the JavaScript worker was killed by signal %s from outside Cairn (%s)", sig, note)
	default:
		msg = fmt.Sprintf("the JavaScript worker exited unexpectedly (%s)", note)
	}
	return &jstool.Failure{Kind: "exception", Message: msg}
}
