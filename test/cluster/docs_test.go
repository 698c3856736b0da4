package cluster_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docSilence is how long a node of the documented cluster may write
// nothing to its log, neither ready nor exited, before the test calls it
// a silent hang: a starting node says what it waits for every few
// seconds.
const docSilence = time.Minute

// clusterExample is the cluster's command block of a document: the first
// ```sh block that runs `serve` with --nats-cluster.
func clusterExample(t *testing.T, doc string) string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(block[1], "serve") && strings.Contains(block[1], "--nats-cluster") {
			return block[1]
		}
	}
	t.Fatalf("%s: no ```sh block runs serve with --nats-cluster", doc)
	return ""
}

// docCluster is the documented example, read as a reader reads it: the
// line that exports the route secret, the command that starts n1 (its
// continued lines joined), and the line that says n2 and n3 are started
// alike.
type docCluster struct {
	export string
	n1     string
}

func parseExample(t *testing.T, block string) docCluster {
	t.Helper()
	var d docCluster
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "export CAIRN_NATS_ROUTE_SECRET="):
			d.export = line
		case strings.HasPrefix(line, "go run ./cmd/node serve"):
			cmd := line
			for strings.HasSuffix(cmd, "\\") && i+1 < len(lines) {
				i++
				cmd += "\n" + lines[i]
			}
			d.n1 = cmd
		case strings.HasPrefix(line, "# n2 and n3 alike"):
		default:
			t.Fatalf("the example has a line this test does not know how to run: %q", line)
		}
	}
	if d.export == "" || d.n1 == "" {
		t.Fatalf("the example lacks the secret's export or n1's command:\n%s", block)
	}
	return d
}

// alike is the command of node k (2, 3) "alike" n1's, as a reader writes
// it: its own name and data directory (n1 -> nk), its own HTTP port and
// route port (n1's plus k-1: 8701 -> 870k, 6221 -> 622k), and the other
// two nodes' route ports as its routes, in the order of the nodes. n1's
// own routes must be what this rule gives it, or the rule is not the
// example's.
func alike(t *testing.T, n1 string, k int) string {
	t.Helper()
	flag := func(name string) string {
		m := regexp.MustCompile(`--` + name + ` (\S+)`).FindStringSubmatch(n1)
		if m == nil {
			t.Fatalf("n1's command has no --%s:\n%s", name, n1)
		}
		return m[1]
	}
	host, port := func(addr string) (string, int) {
		h, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		return h, n
	}(flag("nats-cluster"))
	routes := func(self int) string {
		var rs []string
		for j := 1; j <= 3; j++ {
			if j != self {
				rs = append(rs, net.JoinHostPort(host, strconv.Itoa(port+j-1)))
			}
		}
		return strings.Join(rs, ",")
	}
	if got := flag("nats-routes"); got != routes(1) {
		t.Fatalf("n1's --nats-routes is %s; the rule that makes n2 and n3 gives it %s", got, routes(1))
	}
	lhost, lport := func(addr string) (string, int) {
		h, p, _ := net.SplitHostPort(addr)
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		return h, n
	}(flag("listen"))
	name := fmt.Sprintf("n%d", k)
	r := strings.NewReplacer(
		"--node-name "+flag("node-name"), "--node-name "+name,
		"--data "+flag("data"), "--data "+name,
		"--listen "+flag("listen"), "--listen "+net.JoinHostPort(lhost, strconv.Itoa(lport+k-1)),
		"--nats-cluster "+flag("nats-cluster"), "--nats-cluster "+net.JoinHostPort(host, strconv.Itoa(port+k-1)),
		"--nats-routes "+flag("nats-routes"), "--nats-routes "+routes(k),
	)
	return r.Replace(n1)
}

// Issue 43: the cluster example of README.md and docs/operations.md, run
// as written: the route secret exported as the line says (by sh), n1
// started by its command as printed, n2 and n3 by the same command made
// "alike" (see alike), each by sh in one working directory, with `go run
// ./cmd/node` replaced by the node binary built for these tests. Each
// node's /readyz answers 200, and a run started through n1's API (the
// README's researcher, on the example agents the command's defaults
// name) completes, as n2 reports it. The example's ports (8701-8703,
// 6221-6223) are used as printed: the test fails, naming the port, when
// one is taken. Before the fix the three nodes started, printed nothing
// and never listened: the test fails on their silence.
func TestDocumentedCluster(t *testing.T) {
	readme := clusterExample(t, "../../README.md")
	if ops := clusterExample(t, "../../docs/operations.md"); ops != readme {
		t.Fatalf("README.md and docs/operations.md show different cluster examples:\n%s\n---\n%s", readme, ops)
	}
	ex := parseExample(t, readme)
	cmds := []string{ex.n1, alike(t, ex.n1, 2), alike(t, ex.n1, 3)}
	for _, c := range cmds {
		for _, addr := range regexp.MustCompile(`127\.0\.0\.1:\d+`).FindAllString(c, -1) {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("the example's port %s is taken on this machine: %v", addr, err)
			}
			_ = l.Close()
		}
	}

	// The secret, as the export line makes it (the same on every node).
	out, err := exec.Command("sh", "-c", ex.export+"\nprintf %s \"$CAIRN_NATS_ROUTE_SECRET\"").Output()
	if err != nil || len(out) < 16 {
		t.Fatalf("%s: %q, %v", ex.export, out, err)
	}
	secret := string(out)

	// The working directory: the command's default --agents is
	// examples/agents.
	dir := t.TempDir()
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(examples, filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAIRN_") && !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "ANTHROPIC_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CAIRN_NATS_ROUTE_SECRET="+secret)

	type node struct {
		name, listen, log string
		cmd               *exec.Cmd
		exited            chan struct{}
	}
	var nodes []*node
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, n := range nodes {
			select {
			case <-n.exited:
			case <-time.After(30 * time.Second):
				_ = n.cmd.Process.Kill()
				<-n.exited
			}
			if t.Failed() {
				t.Logf("--- %s (%s) log (tail):\n%s", n.name, n.listen, tail(n.log, 40))
			}
		}
	})
	for i, c := range cmds {
		n := &node{name: fmt.Sprintf("n%d", i+1), listen: regexp.MustCompile(`--listen (\S+)`).FindStringSubmatch(c)[1],
			log: filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)), exited: make(chan struct{})}
		script := "exec " + strings.Replace(c, "go run ./cmd/node", nodeBin, 1)
		t.Logf("%s: %s", n.name, script)
		logf, err := os.Create(n.log)
		if err != nil {
			t.Fatal(err)
		}
		n.cmd = exec.Command("sh", "-c", script)
		n.cmd.Dir, n.cmd.Env, n.cmd.Stdout, n.cmd.Stderr = dir, env, logf, logf
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = n.cmd.Wait()
			_ = logf.Close()
			close(n.exited)
		}()
		nodes = append(nodes, n)
	}

	// Ready, each of them; a node that exits, or writes nothing for
	// docSilence while not ready, fails the test.
	for _, n := range nodes {
		size, quiet := int64(-1), time.Now()
		for {
			select {
			case <-n.exited:
				t.Fatalf("%s exited while starting", n.name)
			default:
			}
			if res, err := http.Get("http://" + n.listen + "/readyz"); err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					break
				}
			}
			if fi, err := os.Stat(n.log); err == nil && fi.Size() != size {
				size, quiet = fi.Size(), time.Now()
			}
			if time.Since(quiet) > docSilence {
				t.Fatalf("%s: not ready and its log silent for %v: a silent hang", n.name, docSilence)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// A run through n1, completed as n2 sees it.
	res, err := http.Post("http://"+nodes[0].listen+"/v1/runs", "application/json",
		strings.NewReader(`{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var started struct {
		RunID string `json:"run_id"`
	}
	if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &started) != nil || started.RunID == "" {
		t.Fatalf("start a run through n1: %s: %s", res.Status, b)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		res, err := http.Get("http://" + nodes[1].listen + "/v1/runs/" + started.RunID)
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var run struct {
				Status string `json:"status"`
			}
			if res.StatusCode == http.StatusOK && json.Unmarshal(b, &run) == nil {
				switch run.Status {
				case "completed":
					return
				case "failed", "cancelled":
					t.Fatalf("run %s %s: %s", started.RunID, run.Status, bytes.TrimSpace(b))
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not completed after 3 minutes", started.RunID)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
