package chaos_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/test/chaos"
)

// A rolling upgrade of a three-node cluster from the build of the log's
// schema version 1 (the node built with -tags cairn_schema1: every commit
// lists its calls whole, version 2 refused) to this build, node by node,
// each stopped (SIGTERM) and started again on its data with the new
// binary, while a client submits runs with children throughout (the
// researcher: a response of two spawns), and fact-checker roots, which
// keep their budget in their log where the log's version has it. The rule
// under test (docs/operations.md, Upgrades): a member announces the newest
// version it reads, and every member writes the least of those (the
// cluster's level). So while one old node is a member no event of a
// version above 1 is written and no node ever meets an event it cannot
// read; once the last old node has left (for RaiseAfter, 10 member TTLs),
// the new build writes version 2 (call changes only) and version 4 (the
// budget totals of a fact-checker root started since). The old build also
// keeps the active set as builds before the one that derives it from the
// log did (actors.EarlierActiveSet: it writes every run to the bucket
// cairn_active and sweeps that alone), so the new build writes the bucket
// too while an old node is a member.
// Every run submitted ends and the log's audit finds no violation.
func TestRollingUpgrade(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), d.Add(-cleanupMargin))
	}
	defer cancel()
	const seed = 1
	oldBin := build(t, "node-schema1", "github.com/cairn-agents/cairn/cmd/node")
	newBin := build(t, "node", "github.com/cairn-agents/cairn/cmd/node")
	e := newEnvOf(t, chaos.Topology{Name: "rolling upgrade", Nodes: 3, MemberTTL: memberTTL}, seed, 512, oldBin)
	if err := e.waitReady(ctx); err != nil {
		e.report(nil, true)
		t.Fatalf("first start: %v", err)
	}
	cl := startClient(t, e)
	const between = 8 * time.Second // runs go on between the steps
	sleep(ctx, between)
	var lastOldGone time.Time // the last old node's process had exited
	for _, p := range e.nodes {
		e.note("upgrade %s: stop it, start this build on its data", p.name)
		p.stop()
		lastOldGone = time.Now()
		p.useBinary(oldBin, newBin)
		if err := p.start("upgraded to this build"); err != nil {
			t.Fatal(err)
		}
		if err := p.waitReady(ctx); err != nil {
			e.violate("%s after its upgrade: %v", p.name, err)
		}
		sleep(ctx, between)
	}
	// The level rises a RaiseAfter (10 member TTLs) after the last old
	// member left: runs go on meanwhile, and after.
	sleep(ctx, 10*memberTTL+between)
	settle := 60 * time.Second
	cl.finish(time.Now().Add(settle))
	subs, _, _ := cl.submissions()

	nc, js, err := e.connect()
	if err != nil {
		e.report(nil, true)
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(settle)
	var rep *chaos.Report
	var recs []chaos.Record
	for {
		if recs, err = e.readLog(ctx, js); err != nil {
			e.report(nil, true)
			t.Fatal(err)
		}
		rep = chaos.Audit(recs, subs)
		if len(rep.Unended) == 0 || time.Now().After(deadline) {
			break
		}
		sleep(ctx, 2*time.Second)
	}
	if err := e.auditSteps(t, ctx, rep); err != nil {
		e.report(nil, true)
		t.Fatal(err)
	}
	var v1, later, changesOnly, ledgers int
	for _, r := range recs {
		switch {
		case r.Err != nil:
			continue // undecodable: the audit reports it
		case r.Event.Version == 1:
			v1++
			continue
		}
		later++
		if r.Time.Before(lastOldGone) {
			e.violate("seq %d (%s of run %s) is version %d, written at %s while a node of version 1 ran (the last exited at %s)",
				r.Seq, r.Event.Type, r.Event.RunID, r.Event.Version, r.Time.Format("15:04:05.000"), lastOldGone.Format("15:04:05.000"))
		}
		if r.Event.Type == events.CheckpointCommitted {
			if p, err := events.DecodeCheckpoint(r.Event); err == nil {
				if !p.ListsCalls() {
					changesOnly++
				}
				if p.Ledger != nil {
					ledgers++
				}
			}
		}
	}
	t.Logf("%d roots (%d runs, %d events: %d of version 1, %d of later versions, %d commits listing call changes only, %d carrying budget totals); stuck %d, failed %d",
		rep.Roots, len(rep.Runs), rep.Events, v1, later, changesOnly, ledgers, len(rep.Unended), len(rep.Failed))
	if changesOnly > 0 && ledgers == 0 {
		e.violate("the level rose (%d commits of call changes) and no commit carries budget totals: no fact-checker root kept its budget in its log", changesOnly)
	}
	if v1 == 0 || changesOnly == 0 {
		e.violate("the log has %d events of version 1 and %d commits of call changes: the upgrade was not seen from both sides", v1, changesOnly)
	}
	if len(rep.Failed) > 0 {
		e.violate("%d runs failed during the upgrade", len(rep.Failed))
	}
	for _, p := range e.nodes {
		for _, l := range p.grep("unknown schema version", 3) {
			e.violate("%s met an event it cannot read: %.300s", p.name, l)
		}
		for _, c := range p.crashes() {
			e.violate("%s crashed:\n%s", p.name, c)
		}
	}
	e.report(rep, false)
}

// useBinary makes the process's next start run to instead of from (a
// clustered node is started through env(1), its binary the second
// argument).
func (p *proc) useBinary(from, to string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bin == from {
		p.bin = to
		return
	}
	for i, a := range p.args {
		if a == from {
			p.args[i] = to
			return
		}
	}
	panic("useBinary: " + p.name + " does not run " + from + ": " + p.bin + " " + strings.Join(p.args, " "))
}
