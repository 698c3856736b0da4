package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/internal/syncbuf"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// silence is how long a starting node may print nothing, and neither
// serve nor exit, before a test calls it hung: it says what it waits for
// every startLogEvery.
const silence = time.Minute

const testRouteSecret = "node-test-route-secret-0123456789"

// nodeProc is `node serve` in a subprocess (this test binary, TestMain),
// its stderr read line by line.
type nodeProc struct {
	t      *testing.T
	name   string
	http   string // its --listen
	cmd    *exec.Cmd
	lines  chan string   // stderr, line by line; closed at its end
	exited chan struct{} // closed once it exited; then code holds its exit code
	code   int
	mu     sync.Mutex
	log    strings.Builder // everything it printed
}

// startNode starts `node serve args...` with env added to this process's
// environment (less its CAIRN_* variables and model keys: the scripted
// models of the agents run).
func startNode(t *testing.T, name string, env []string, args ...string) *nodeProc {
	t.Helper()
	p := &nodeProc{t: t, name: name, lines: make(chan string, 1024), exited: make(chan struct{})}
	for i, a := range args {
		if a == "--listen" && i+1 < len(args) {
			p.http = args[i+1]
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAIRN_") && !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "ANTHROPIC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, env...), "CAIRN_NODE_ARGS="+strings.Join(append([]string{"serve"}, args...), "\x1f"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default: // a reader that does not read misses lines, not the log
			}
		}
		close(p.lines)
		err := cmd.Wait()
		p.code = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("--- %s's output:\n%s", p.name, p.output())
		}
	})
	return p
}

func (p *nodeProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// until reads the node's lines until done says so (given each line, or ""
// every 200 ms), failing the test when the node exits first or prints
// nothing for silence.
func (p *nodeProc) until(what string, done func(line string) bool) {
	p.t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	quiet := time.NewTimer(silence)
	defer quiet.Stop()
	lines := p.lines
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil // it exited: p.exited follows
				continue
			}
			if done(line) {
				return
			}
			quiet.Reset(silence)
		case <-tick.C:
			if done("") {
				return
			}
		case <-p.exited:
			p.t.Fatalf("%s exited (code %d) before %s", p.name, p.code, what)
		case <-quiet.C:
			p.t.Fatalf("%s printed nothing for %v, neither serving nor exiting, before %s: a silent hang", p.name, silence, what)
		}
	}
}

// ready reports whether the node's /readyz answers 200.
func (p *nodeProc) ready() bool {
	res, err := http.Get("http://" + p.http + "/readyz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// stop sends SIGTERM and waits for the node to exit; it returns its code.
func (p *nodeProc) stop() int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		p.t.Fatalf("%s did not exit within a minute of SIGTERM", p.name)
	}
	return p.code
}

// exitsNaming waits for the node to exit on its own, non-zero, and for
// its output to name want; a node that prints nothing for silence fails
// the test.
func (p *nodeProc) exitsNaming(want string) {
	p.t.Helper()
	began := time.Now()
	quiet := time.NewTimer(silence)
	defer quiet.Stop()
	lines := p.lines
	for {
		select {
		case <-p.exited:
			if p.code == 0 || !strings.Contains(p.output(), want) {
				p.t.Fatalf("%s exited %d; want non-zero, naming %s", p.name, p.code, want)
			}
			p.t.Logf("%s exited %d after %v: %s", p.name, p.code, time.Since(began).Round(time.Millisecond), lastLine(p.output()))
			return
		case _, ok := <-lines:
			if !ok {
				lines = nil
			}
			quiet.Reset(silence)
		case <-quiet.C:
			p.t.Fatalf("%s printed nothing for %v and did not exit: a silent hang (want an exit naming %s)", p.name, silence, want)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func loopbackPort(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(natstest.FreePort(t)) }

// Issue 43: combinations of the cluster's flags that cannot work exit
// non-zero at once, naming the flag or the variable at fault.
func TestClusterFlagsThatCannotWork(t *testing.T) {
	secret := []string{"CAIRN_NATS_ROUTE_SECRET=" + testRouteSecret}
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"routes without a route listener", secret, []string{"--nats-routes", "127.0.0.1:6222"}, "--nats-routes"},
		{"a route listener without routes", secret, []string{"--nats-cluster", "127.0.0.1:6221"}, "--nats-routes"},
		{"no route secret", nil, []string{"--nats-cluster", "127.0.0.1:6221", "--nats-routes", "127.0.0.1:6222"}, "CAIRN_NATS_ROUTE_SECRET"},
		{"a short route secret", []string{"CAIRN_NATS_ROUTE_SECRET=short"}, []string{"--nats-cluster", "127.0.0.1:6221", "--nats-routes", "127.0.0.1:6222"}, "CAIRN_NATS_ROUTE_SECRET"},
		{"an embedded and an external NATS", secret, []string{"--nats-cluster", "127.0.0.1:6221", "--nats-routes", "127.0.0.1:6222", "--nats", "nats://127.0.0.1:4222"}, "--nats-cluster"},
		{"a TLS certificate alone", secret, []string{"--nats-cluster", "127.0.0.1:6221", "--nats-routes", "127.0.0.1:6222", "--nats-tls-cert", "cert.pem"}, "--nats-tls-key"},
		{"two replicas", secret, []string{"--nats-cluster", "127.0.0.1:6221", "--nats-routes", "127.0.0.1:6222", "--replicas", "2"}, "--replicas"},
		{"a node name with a dot", secret, []string{"--node-name", "n.1", "--nats-cluster", "127.0.0.1:6221", "--nats-routes", "127.0.0.1:6222"}, "--node-name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startNode(t, "node", tt.env, append([]string{"--agents", "../../examples/agents", "--data", t.TempDir(), "--listen", loopbackPort(t)}, tt.args...)...)
			p.exitsNaming(tt.want)
		})
	}
}

// Of two nodes given one name, one exits at once, naming --node-name:
// JetStream tells its peers apart by name, and a server refuses a route
// from a server of its own name (the one that dials learns nothing, so
// the other may go on waiting, as that name's only node now). Before
// issue 43 both waited for good.
func TestTwoNodesOfOneName(t *testing.T) {
	routes := []string{loopbackPort(t), loopbackPort(t)}
	env := []string{"CAIRN_NATS_ROUTE_SECRET=" + testRouteSecret}
	exited := make(chan *nodeProc, len(routes))
	for i := range routes {
		p := startNode(t, fmt.Sprintf("n1 (%d)", i+1), env, "--agents", "../../examples/agents", "--data", t.TempDir(), "--listen", loopbackPort(t),
			"--node-name", "n1", "--nats-cluster", routes[i], "--nats-routes", routes[1-i])
		go func() {
			<-p.exited
			exited <- p
		}()
	}
	select {
	case p := <-exited:
		if p.code == 0 || !strings.Contains(p.output(), "--node-name n1") {
			t.Fatalf("%s exited %d; want non-zero, naming --node-name", p.name, p.code)
		}
		t.Logf("%s: %s", p.name, lastLine(p.output()))
	case <-time.After(2 * time.Minute):
		t.Fatal("neither node exited within 2 minutes")
	}
}

// Issue 43: one node of the documented cluster, its peers not started,
// says from the start and every few seconds what it waits for (the
// routes it dials, the servers it has, the replicas the log needs), and
// SIGTERM ends the wait at once. Before the fix it printed nothing, ever,
// and SIGTERM did not stop it.
func TestANodeWaitingForItsPeersSaysSo(t *testing.T) {
	routes := []string{loopbackPort(t), loopbackPort(t), loopbackPort(t)}
	p := startNode(t, "n1", []string{"CAIRN_NATS_ROUTE_SECRET=" + testRouteSecret}, "--agents", "../../examples/agents", "--data", t.TempDir(),
		"--listen", loopbackPort(t), "--node-name", "n1", "--nats-cluster", routes[0], "--nats-routes", routes[1]+","+routes[2])
	waits := 0
	p.until("it said twice what it waits for", func(line string) bool {
		if strings.Contains(line, "waiting for the NATS cluster") {
			for _, want := range []string{"routes=" + routes[1] + "," + routes[2], `connected="1 of 3 servers [n1]"`, "replicas=3"} {
				if !strings.Contains(line, want) {
					t.Fatalf("%q lacks %q", line, want)
				}
			}
			waits++
		}
		return waits == 2
	})
	if code := p.stop(); code != 0 {
		t.Fatalf("stopped while it waited: exit %d, want 0", code)
	}
	if out := p.output(); !strings.Contains(out, "node stopped before it served") {
		t.Fatalf("no word of the stop:\n%s", out)
	}
}

// The other forms of a cluster member the documents show start and
// become ready alone: --cluster on the node's own embedded server, and
// --cluster --nats URL on an external NATS.
func TestClusterFormsBecomeReady(t *testing.T) {
	external := natstest.Server(t)
	tests := []struct {
		name string
		args []string
	}{
		{"--cluster", []string{"--cluster", "--node-name", "n1"}},
		{"--cluster --nats", []string{"--cluster", "--node-name", "n1", "--nats", external.ClientURL()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startNode(t, "n1", nil, append([]string{"--agents", "../../examples/agents", "--data", t.TempDir(), "--listen", loopbackPort(t)}, tt.args...)...)
			p.until("it is ready", func(string) bool { return p.ready() })
			if code := p.stop(); code != 0 {
				t.Fatalf("exit %d after SIGTERM", code)
			}
		})
	}
}

// Issue 43: a node whose member started while the log's stream had a
// quorum, and lost it before the run index started, exited ("runindex:
// context deadline exceeded"). Now it waits, saying so, and serves once
// the quorum is back. Fails before the fix: serve returns the error.
func TestRunIndexWaitsOutAQuorumLoss(t *testing.T) {
	ports := []int{natstest.FreePort(t), natstest.FreePort(t), natstest.FreePort(t)}
	cfgs := make([]jetstream.ServerConfig, len(ports))
	for i := range ports {
		var routes []string
		for j, p := range ports {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		cfgs[i] = jetstream.ServerConfig{StoreDir: t.TempDir(), ServerName: fmt.Sprintf("s%d", i), Port: 0,
			Cluster: &jetstream.ClusterConfig{Name: "c", Host: "127.0.0.1", Port: ports[i], Routes: routes}}
	}
	servers := make([]*jetstream.Server, len(ports))
	start := func(i int) {
		s, err := jetstream.StartServer(cfgs[i])
		if err != nil {
			t.Fatalf("s%d: %v", i, err)
		}
		servers[i] = s
	}
	t.Cleanup(func() {
		for _, s := range servers {
			if s != nil {
				_ = s.Close(context.Background())
			}
		}
	})
	for i := range servers {
		start(i)
	}
	js, err := njs.New(natstest.Connect(t, servers[0]))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.CreateStream(ctx, njs.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: 3, Storage: njs.MemoryStorage})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no R3 stream after a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	var buf syncbuf.Buffer
	o := serveOptions{nodeOptions: nodeOptions{agentsDir: "../../examples/agents", data: t.TempDir(), natsURL: servers[0].ClientURL(),
		logger:  slog.New(slog.NewTextHandler(&buf, nil)),
		cluster: clusterOptions{enabled: true, name: "n1", listen: "127.0.0.1:0", ttl: 10 * time.Second, replicas: 3, embedded: &embedded{}}},
		listen: "127.0.0.1:0"}
	o.hooks.memberStarted = func() {
		// Two of the three servers go: the log has no quorum.
		for _, i := range []int{1, 2} {
			if err := servers[i].Close(context.Background()); err != nil {
				t.Errorf("close s%d: %v", i, err)
			}
			servers[i] = nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	// served is closed once serve returned, with its error in serveErr.
	ready, served := make(chan string, 1), make(chan struct{})
	var serveErr error
	go func() {
		serveErr = serve(ctx, o, ready)
		close(served)
	}()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	// It says what it waits for; then one server comes back.
	deadline = time.Now().Add(2 * time.Minute)
	for !strings.Contains(buf.String(), "waiting for the run index") {
		select {
		case <-served:
			t.Fatalf("serve returned while the quorum was lost: %v\n%s", serveErr, buf.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no word of the wait after 2 minutes:\n%s", buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	start(1)
	select {
	case addr := <-ready:
		t.Logf("serving at %s once s1 was back", addr)
	case <-served:
		t.Fatalf("serve: %v\n%s", serveErr, buf.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("not serving 3 minutes after the quorum came back:\n%s", buf.String())
	}
}
