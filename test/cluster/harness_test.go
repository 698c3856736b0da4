// Package cluster_test runs Cairn nodes as separate processes on loopback,
// each embedding a NATS server of one NATS cluster (the run log at three
// replicas), and breaks them the way machines break: kill -9, SIGSTOP.
// The node binary is built once per test run.
package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/cluster/clustertest"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

var nodeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cairn-cluster-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nodeBin = filepath.Join(dir, "node")
	build := exec.Command("go", "build", "-o", nodeBin, "github.com/cairn-agents/cairn/cmd/node")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build the node:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// Short membership times keep the tests fast: a member that stops
// refreshing is gone after memberTTL.
const (
	memberTTL       = 3 * time.Second
	memberHeartbeat = 400 * time.Millisecond
)

type proc struct {
	name                string
	dir, logPath        string
	http, route, client int
	args                []string
	// env is added to the node's environment (after the harness's own).
	env    []string
	cmd    *exec.Cmd
	exited chan struct{}
}

type testCluster struct {
	t     *testing.T
	nodes []*proc
}

// newCluster starts n nodes; with n > 1 each embeds a NATS server of one
// NATS cluster and the nodes form one Cairn cluster.
func newCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	return newClusterWith(t, n, nil)
}

// newClusterWith is newCluster with each node's arguments and environment
// changed by setup before it starts (nil: none).
func newClusterWith(t *testing.T, n int, setup func(i int, p *proc)) *testCluster {
	t.Helper()
	agents, err := filepath.Abs("testdata/agents")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t}
	for i := range n {
		p := &proc{name: fmt.Sprintf("n%d", i+1), dir: t.TempDir(), http: natstest.FreePort(t), route: natstest.FreePort(t), client: natstest.FreePort(t)}
		p.logPath = filepath.Join(p.dir, "node.log")
		c.nodes = append(c.nodes, p)
	}
	for _, p := range c.nodes {
		p.args = []string{"serve", "--agents", agents, "--data", filepath.Join(p.dir, "data"), "--listen", fmt.Sprintf("127.0.0.1:%d", p.http),
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", p.client), "--nosync"}
		if n > 1 {
			var routes []string
			for _, q := range c.nodes {
				if q != p {
					routes = append(routes, fmt.Sprintf("127.0.0.1:%d", q.route))
				}
			}
			p.args = append(p.args, "--node-name", p.name, "--nats-cluster", fmt.Sprintf("127.0.0.1:%d", p.route), "--nats-routes", strings.Join(routes, ","),
				"--member-ttl", memberTTL.String(), "--member-heartbeat", memberHeartbeat.String())
		}
	}
	if setup != nil {
		for i, p := range c.nodes {
			setup(i, p)
		}
	}
	t.Cleanup(c.stopAll)
	for i := range c.nodes {
		c.start(i)
	}
	for i := range c.nodes {
		c.waitReady(i)
	}
	return c
}

// start starts (or restarts) node i with its arguments and data.
func (c *testCluster) start(i int) {
	c.t.Helper()
	p := c.nodes[i]
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(nodeBin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The scripted models in testdata, whatever keys this machine has.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CAIRN_") && !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "ANTHROPIC_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// The routes' shared secret, the same on every node.
	cmd.Env = append(cmd.Env, "CAIRN_NATS_ROUTE_SECRET=cluster-test-route-secret-0123456789")
	cmd.Env = append(cmd.Env, p.env...)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(p.exited)
	}()
}

func (c *testCluster) stopAll() {
	var wg sync.WaitGroup
	for _, p := range c.nodes {
		if p.cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}()
	}
	wg.Wait()
	if c.t.Failed() {
		for _, p := range c.nodes {
			c.t.Logf("--- %s log (tail):\n%s", p.name, tail(p.logPath, 40))
		}
	}
}

func tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

func (c *testCluster) waitReady(i int) {
	c.t.Helper()
	p := c.nodes[i]
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case <-p.exited:
			c.t.Fatalf("%s exited while starting:\n%s", p.name, tail(p.logPath, 30))
		default:
		}
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.http))
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not ready after 3 minutes:\n%s", p.name, tail(p.logPath, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *testCluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	if err := c.nodes[i].cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// kill is kill -9: nothing of the node runs after it.
func (c *testCluster) kill(i int) {
	c.t.Helper()
	c.signal(i, syscall.SIGKILL)
	<-c.nodes[i].exited
}

// startRuns starts count root runs of the planner through node i's API.
func (c *testCluster) startRuns(i, count int) []string {
	c.t.Helper()
	ids := make([]string, count)
	errs := make(chan error, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 6)
	for k := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"agent":"planner","message":"task %d"}`, k)
			res, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/runs", c.nodes[i].http), "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer res.Body.Close()
			var out struct {
				RunID string `json:"run_id"`
			}
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &out) != nil {
				errs <- fmt.Errorf("start run: %s: %s", res.Status, b)
				return
			}
			ids[k] = out.RunID
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatal(err)
	}
	return ids
}

type entry struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

// runs lists every run (children too) as node i's API sees it.
func (c *testCluster) runs(i int) ([]entry, error) {
	var all []entry
	cursor := ""
	for {
		// Every page: the list is paged (100 runs by default).
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/runs?children=true&limit=1000&cursor=%s", c.nodes[i].http, url.QueryEscape(cursor)))
		if err != nil {
			return nil, err
		}
		var out struct {
			Runs []entry `json:"runs"`
			Next string  `json:"next_cursor"`
		}
		err = json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, out.Runs...)
		if out.Next == "" {
			return all, nil
		}
		cursor = out.Next
	}
}

// progress counts runs by status through node i.
func (c *testCluster) progress(i int) (completed, total int, failed []entry) {
	runs, err := c.runs(i)
	if err != nil {
		return 0, 0, nil
	}
	for _, r := range runs {
		switch r.Status {
		case "completed":
			completed++
		case "failed", "cancelled":
			failed = append(failed, r)
		}
	}
	return completed, len(runs), failed
}

// waitCompleted waits until node i lists want runs, all completed.
func (c *testCluster) waitCompleted(i, want int) {
	c.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		done, total, failed := c.progress(i)
		if len(failed) > 0 {
			c.t.Fatalf("runs did not complete: %+v", failed)
		}
		if done == want && total == want {
			return
		}
		if time.Now().After(deadline) {
			runs, _ := c.runs(i)
			for _, r := range runs {
				if r.Status != "completed" {
					c.t.Logf("run %s is %s; the nodes' log lines about it:", r.RunID, r.Status)
					for _, p := range c.nodes {
						b, _ := os.ReadFile(p.logPath)
						for _, line := range strings.Split(string(b), "\n") {
							if strings.Contains(line, r.RunID) {
								c.t.Logf("  %s: %.300s", p.name, line)
							}
						}
					}
				}
			}
			c.t.Fatalf("after 3 minutes: %d of %d runs completed, want %d", done, total, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitProgress waits until at least min runs completed through node i and
// returns the counts then.
func (c *testCluster) waitProgress(i, min int) (completed, total int) {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done, total, _ := c.progress(i)
		if done >= min {
			return done, total
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after 2 minutes: %d runs completed, want %d", done, min)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkLog reads the whole log through the live nodes' NATS servers and
// fails on every violation.
func (c *testCluster) checkLog(live ...int) *clustertest.Report {
	c.t.Helper()
	rep := c.report(live...)
	for _, v := range rep.Violations {
		c.t.Error(v)
	}
	for _, id := range rep.Incomplete() {
		c.t.Errorf("run %s never completed", id)
	}
	return rep
}

// report reads the log through the live nodes' NATS servers, asserting
// nothing (mid-run, most runs are incomplete).
func (c *testCluster) report(live ...int) *clustertest.Report {
	c.t.Helper()
	rep, err := c.tryReport(time.Minute, live...)
	if err != nil {
		c.t.Fatal(err)
	}
	return rep
}

// tryReport is report that returns its error: while a stream's leader is
// paused, reading it fails until a new leader is elected.
func (c *testCluster) tryReport(timeout time.Duration, live ...int) (*clustertest.Report, error) {
	var urls []string
	for _, i := range live {
		u, err := readerURL(filepath.Join(c.nodes[i].dir, "data"), c.nodes[i].client)
		if err != nil {
			return nil, err
		}
		urls = append(urls, u)
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return clustertest.Check(ctx, js, "CAIRN")
}

// logCount counts the lines of node i's log that contain phrase.
func (c *testCluster) logCount(i int, phrase string) int {
	b, _ := os.ReadFile(c.nodes[i].logPath)
	return bytes.Count(b, []byte(phrase))
}

// nodeOf names the node of a lease holder (member IDs are <name>-<random>).
func nodeOf(holder string) string { name, _, _ := strings.Cut(holder, "-"); return name }

// leasesBy counts the lease acquisitions of each node at or after since.
func leasesBy(rep *clustertest.Report, since time.Time) map[string]int {
	out := map[string]int{}
	for _, r := range rep.Runs {
		for _, l := range r.Leases {
			if !l.Time.Before(since) {
				out[nodeOf(l.Holder)]++
			}
		}
	}
	return out
}

// resumeFigures finds the runs a node held when it stopped at t0 and that
// another node took over: how many, and how long from t0 to the first
// commit of one of them under its new owner.
func resumeFigures(rep *clustertest.Report, node string, t0 time.Time) (moved int, firstCommit time.Duration) {
	firstCommit = -1
	for _, r := range rep.Runs {
		held := false
		var newEpochs []int64
		for _, l := range r.Leases {
			switch {
			case l.Time.Before(t0):
				held = nodeOf(l.Holder) == node
			case nodeOf(l.Holder) != node && held:
				newEpochs = append(newEpochs, l.Epoch)
			}
		}
		if len(newEpochs) == 0 {
			continue
		}
		moved++
		for _, cm := range r.Commits {
			if cm.Time.After(t0) && cm.Epoch >= newEpochs[0] {
				if d := cm.Time.Sub(t0); firstCommit < 0 || d < firstCommit {
					firstCommit = d
				}
				break
			}
		}
	}
	return moved, firstCommit
}

// commitRate is the log's commits per second between its first and last
// commit.
func commitRate(rep *clustertest.Report) (commits int, perSecond float64) {
	var first, last time.Time
	for _, r := range rep.Runs {
		for _, c := range r.Commits {
			commits++
			if first.IsZero() || c.Time.Before(first) {
				first = c.Time
			}
			if c.Time.After(last) {
				last = c.Time
			}
		}
	}
	if d := last.Sub(first).Seconds(); d > 0 {
		perSecond = float64(commits) / d
	}
	return commits, perSecond
}

// readerURL is the client URL of a node's embedded server with the
// node's reader credentials (each node has its own, in its data
// directory): the audit reads the log as an event-stream consumer would,
// with the least privilege.
func readerURL(data string, port int) (string, error) {
	c, err := cjs.LoadCredentials(filepath.Join(data, "nats-credentials.json"))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("nats://reader:%s@127.0.0.1:%d", c.Reader, port), nil
}
