package cluster_test

import (
	"syscall"
	"testing"
	"time"
)

// Every run is a planner with two workers: 30 roots are 90 runs.
const roots, runsPerRoot = 30, 3

// kill -9 one of three nodes while 30 roots with their children are in
// flight: every run completes exactly once (the log has no revision
// appended twice, no commit under a superseded lease, no second
// completion), and the killed node, restarted, rejoins and takes work.
func TestKillANodeMidRun(t *testing.T) {
	c := newCluster(t, 3)
	start := time.Now()
	c.startRuns(0, roots)
	// In flight: some runs done, not all.
	done, total := c.waitProgress(0, 10)
	victim := 1
	killed := time.Now()
	c.kill(victim)
	if done >= roots*runsPerRoot {
		t.Fatalf("the workload finished before the kill (%d of %d runs); lengthen the workers", done, total)
	}
	c.waitCompleted(0, roots*runsPerRoot)
	allDone := time.Since(killed)
	rep := c.checkLog(0, 2)
	moved, first := resumeFigures(rep, "n2", killed)
	t.Logf("kill -9 of n2 with %d of %d runs completed: %d runs moved; first resumed commit of a moved run %v after the kill; all %d runs completed %v after the kill (%v after the first start)",
		done, total, moved, first, roots*runsPerRoot, allDone.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if moved == 0 {
		t.Errorf("no run of n2 was taken over by another node")
	}

	// The killed node restarts on its data and rejoins: runs started
	// through its own API complete, and it runs some of them.
	c.start(victim)
	c.waitReady(victim)
	rejoined := time.Now()
	c.startRuns(victim, 12)
	c.waitCompleted(victim, (roots+12)*runsPerRoot)
	rep = c.checkLog(0, 1, 2)
	by := leasesBy(rep, rejoined)
	t.Logf("after n2 rejoined, leases by node: %v", by)
	if by["n2"] == 0 {
		t.Errorf("the restarted n2 ran none of 36 new runs: %v", by)
	}
}

// SIGSTOP a node for longer than its membership TTL while runs are in
// flight, then SIGCONT: the others took its runs over meanwhile; its stale
// attempts are fenced out by the log; it is expelled, joins again as a new
// member and takes work.
func TestPauseANodeMidRun(t *testing.T) {
	c := newCluster(t, 3)
	c.startRuns(0, roots)
	done, total := c.waitProgress(0, 10)
	victim := 2
	paused := time.Now()
	c.signal(victim, syscall.SIGSTOP)
	if done >= roots*runsPerRoot {
		t.Fatalf("the workload finished before the pause (%d of %d runs); lengthen the workers", done, total)
	}
	// Paused until its entry expired and a run it held moved to a
	// survivor (the paused process also holds a NATS server: the streams
	// it led get new leaders only after Raft's election timeout, 4-9 s),
	// read from the log; a minute past the TTL at most.
	deadline := time.Now().Add(memberTTL + 2*time.Minute)
	for {
		if rep, err := c.tryReport(10*time.Second, 0, 1); err == nil {
			if moved, _ := resumeFigures(rep, "n3", paused); moved > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run of the paused n3 moved to a survivor within %v", time.Since(paused).Round(time.Second))
		}
		time.Sleep(500 * time.Millisecond) // the poll's interval: the log is read whole each time
	}
	c.signal(victim, syscall.SIGCONT)
	resumed := time.Now()
	c.waitCompleted(0, roots*runsPerRoot)
	t.Logf("all runs completed %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
	rep := c.checkLog(0, 1, 2)
	moved, first := resumeFigures(rep, "n3", paused)
	deadline = time.Now().Add(time.Minute)
	for c.logCount(victim, "joined the cluster again") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("n3 did not join again within a minute of SIGCONT")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("n3 joined again %v after SIGCONT", time.Since(resumed).Round(time.Millisecond))
	t.Logf("SIGSTOP of n3 for %v with %d of %d runs completed: %d runs moved, first resumed commit %v after the pause; on n3 after SIGCONT: %d attempts fenced out",
		resumed.Sub(paused).Round(time.Millisecond), done, total, moved, first, c.logCount(victim, "attempt fenced out"))
	if moved == 0 {
		t.Errorf("no run of n3 was taken over while it was paused")
	}
	// Joined is not ready: until n3 is in its own view of the topology
	// it refuses new runs (503) and says so on /readyz, as it should.
	c.waitReady(victim)
	rejoined := time.Now()
	c.startRuns(victim, 12)
	c.waitCompleted(victim, (roots+12)*runsPerRoot)
	rep = c.checkLog(0, 1, 2)
	by := leasesBy(rep, rejoined)
	t.Logf("after n3 rejoined, leases by node: %v", by)
	if by["n3"] == 0 {
		t.Errorf("the rejoined n3 ran none of 36 new runs: %v", by)
	}
}

// Figures only (nothing asserted): commits per second of the same
// workload on one node (an R1 log) and on three (an R3 log across three
// embedded servers), on this machine.
func TestThroughputFigures(t *testing.T) {
	for _, n := range []int{1, 3} {
		c := newCluster(t, n)
		began := time.Now()
		c.startRuns(0, roots)
		c.waitCompleted(0, roots*runsPerRoot)
		wall := time.Since(began)
		live := []int{0}
		if n == 3 {
			live = []int{0, 1, 2}
		}
		rep := c.checkLog(live...)
		commits, rate := commitRate(rep)
		t.Logf("%d node(s): %d runs, %d commits in %v wall; %.0f commits/s between the first and the last commit; leases by node %v",
			n, len(rep.Runs), commits, wall.Round(time.Millisecond), rate, leasesBy(rep, time.Time{}))
		c.stopAll()
	}
}
