package chaos_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The binaries are built once per test process, into a directory outside
// the repository that TestMain removes.
var bins struct {
	dir                 string
	node, nats, nodeOld struct {
		once sync.Once
		path string
		err  error
	}
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cairn-chaos-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.dir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// build builds pkg once per test process, as name: "node", "nats-server",
// or "node-schema1", the node built with -tags cairn_schema1 (the build of
// the log's schema version 1, for TestRollingUpgrade).
func build(t *testing.T, name, pkg string) string {
	t.Helper()
	b, args := &bins.node, []string{"build"}
	switch name {
	case "nats-server":
		b = &bins.nats
	case "node-schema1":
		b, args = &bins.nodeOld, append(args, "-tags", "cairn_schema1")
	}
	b.once.Do(func() {
		b.path = filepath.Join(bins.dir, name)
		cmd := exec.Command("go", append(args, "-o", b.path, pkg)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Short membership times keep a pause short: a member that stops
// refreshing is gone after memberTTL.
const (
	memberTTL       = 3 * time.Second
	memberHeartbeat = 400 * time.Millisecond
	// readyWithin is how long the harness waits for every process to be
	// ready after a fault before it records a violation and goes on.
	readyWithin = 3 * time.Minute
)

// launch is one start of a process and what became of it.
type launch struct {
	n     int
	cause string
	at    time.Time
	// ready is how long the start took to be ready; zero while not seen.
	ready time.Duration
	// killed notes a kill before readiness was seen.
	killed string
}

// proc is a supervised process: the harness kills, pauses and restarts it;
// when it exits by itself while it should run, the supervisor starts it
// again a second later, as systemd or Kubernetes would.
type proc struct {
	name    string
	bin     string
	args    []string
	logPath string
	// data is its data directory: a tmpfs mount when disks can fill.
	data    string
	mounted bool
	// http is a node's API port; monitor the nats-server's; client the
	// NATS client port (a node's embedded server, or the nats-server);
	// route a clustered node's NATS route port.
	http, monitor, client, route int

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	wantUp    bool
	launches  []*launch
	selfExits []string
	errs      []string
}

// start launches the process; cause goes into its log and the figures.
func (p *proc) start(cause string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked(cause)
}

func (p *proc) startLocked(cause string) error {
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			return fmt.Errorf("%s: already running", p.name)
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.name, err)
	}
	l := &launch{n: len(p.launches) + 1, cause: cause, at: time.Now()}
	fmt.Fprintf(logf, "=== chaos: %s start %d (%s) at %s\n", p.name, l.n, cause, l.at.Format("15:04:05.000"))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The agents' scripted models whatever keys this machine has; and the
	// process dies with the test, even when the test is killed.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAIRN_") && !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "ANTHROPIC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if lvl := os.Getenv("CAIRN_CHAOS_LOG_LEVEL"); lvl != "" { // debug: the run lifecycle's events, each completion's delivery
		cmd.Env = append(cmd.Env, "CAIRN_LOG_LEVEL="+lvl)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.wantUp = cmd, exited, true
	p.launches = append(p.launches, l)
	go p.supervise(cmd, exited, logf)
	return nil
}

func (p *proc) supervise(cmd *exec.Cmd, exited chan struct{}, logf *os.File) {
	err := cmd.Wait()
	_ = logf.Close()
	close(exited)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != cmd || !p.wantUp {
		return
	}
	p.selfExits = append(p.selfExits, fmt.Sprintf("%s exited by itself at %s (%v)", p.name, time.Now().Format("15:04:05.000"), err))
	time.AfterFunc(time.Second, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.cmd == cmd && p.wantUp {
			if err := p.startLocked("restarted by the supervisor after it exited"); err != nil {
				p.errs = append(p.errs, err.Error())
			}
		}
	})
}

// kill is kill -9; it returns once the process is gone. The supervisor
// leaves it down until start.
func (p *proc) kill() {
	p.mu.Lock()
	p.wantUp = false
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s: not started", p.name)
	}
	return cmd.Process.Signal(sig)
}

// stop ends the process for good: SIGCONT (it may be paused), SIGTERM,
// and kill -9 after 20 s.
func (p *proc) stop() { p.end(syscall.SIGTERM, 20*time.Second) }

// quit asks the process for a goroutine dump (SIGQUIT, into its log) and
// leaves it down.
func (p *proc) quit() { p.end(syscall.SIGQUIT, 10*time.Second) }

// end leaves the process down: SIGCONT, sig, and kill -9 after grace.
func (p *proc) end(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	p.wantUp = false
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

var probe = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// readyNow asks the process once: a node's /readyz, the nats-server's
// /healthz (JetStream included).
func (p *proc) readyNow() bool {
	if p.monitor != 0 {
		return get(fmt.Sprintf("http://127.0.0.1:%d/healthz", p.monitor))
	}
	return get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.http))
}

// healthyNow is the liveness probe: /healthz of a node or of the
// nats-server.
func (p *proc) healthyNow() bool {
	if p.monitor != 0 {
		return get(fmt.Sprintf("http://127.0.0.1:%d/healthz", p.monitor))
	}
	return get(fmt.Sprintf("http://127.0.0.1:%d/healthz", p.http))
}

func get(url string) bool {
	res, err := probe.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// current is the latest launch and whether its process still runs.
func (p *proc) current() (*launch, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.launches) == 0 {
		return nil, false
	}
	select {
	case <-p.exited:
		return p.launches[len(p.launches)-1], false
	default:
		return p.launches[len(p.launches)-1], true
	}
}

// checkReady asks once whether the process is ready, recording how long
// its latest start took the first time it is.
func (p *proc) checkReady() bool {
	l, running := p.current()
	if !running || !p.readyNow() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l == p.launches[len(p.launches)-1] && l.ready == 0 {
		l.ready = max(time.Since(l.at), time.Millisecond)
	}
	return true
}

// waitReady waits until the process answers ready.
func (p *proc) waitReady(ctx context.Context) error {
	for !p.checkReady() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", p.name, context.Cause(ctx))
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// tail is the last lines of the process's log.
func (p *proc) tail(lines int) string {
	b, _ := os.ReadFile(p.logPath)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// grep is the last max lines of the process's log that contain s.
func (p *proc) grep(s string, limit int) []string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out[max(0, len(out)-limit):]
}

// crashes finds Go panics and fatal errors in the process's log, each with
// the lines that follow it.
func (p *proc) crashes() []string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(string(b), "\n")
	var out []string
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			out = append(out, strings.Join(lines[i:min(len(lines), i+16)], "\n"))
		}
	}
	return out
}

// Disks. A fault fills the filesystem of a process's data directory: a
// small tmpfs mounted for the test where the machine lets it (root, or
// CAP_SYS_ADMIN), removed by the test's cleanup.

var tmpfsProbe struct {
	once sync.Once
	err  error
}

// tmpfsAvailable reports whether this process may mount a tmpfs, and why
// not.
func tmpfsAvailable() error {
	tmpfsProbe.once.Do(func() {
		dir, err := os.MkdirTemp("", "cairn-chaos-probe")
		if err != nil {
			tmpfsProbe.err = err
			return
		}
		defer os.Remove(dir)
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
			tmpfsProbe.err = fmt.Errorf("mount -t tmpfs: %w", err)
			return
		}
		tmpfsProbe.err = unmount(dir)
	})
	return tmpfsProbe.err
}

func mountTmpfs(dir string, mb int) error {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0700", mb)); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmount detaches lazily when the filesystem is still busy, so no mount
// outlives the test.
func unmount(dir string) error {
	if err := syscall.Unmount(dir, 0); err != nil {
		if err2 := syscall.Unmount(dir, syscall.MNT_DETACH); err2 != nil {
			return fmt.Errorf("unmount %s: %w (lazy: %v)", dir, err, err2)
		}
	}
	return nil
}

const fillerName = "chaos-filler"

// fill writes a file into dir until its filesystem has no space left and
// returns how much it wrote.
func fill(dir string) (int64, error) {
	f, err := os.OpenFile(filepath.Join(dir, fillerName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("fill %s: %w", dir, err)
	}
	defer f.Close()
	var n int64
	for _, size := range []int{1 << 20, 4 << 10, 512} {
		chunk := make([]byte, size)
		for {
			k, err := f.Write(chunk)
			n += int64(k)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return n, fmt.Errorf("fill %s: %w", dir, err)
			}
		}
	}
	return n, nil
}

func unfill(dir string) error {
	if err := os.Remove(filepath.Join(dir, fillerName)); err != nil {
		return fmt.Errorf("free %s: %w", dir, err)
	}
	return nil
}
