// Command recordlogs records the logs of real runs, one per crash-matrix
// scenario, each on a fresh embedded NATS server with the production
// store, as events/testdata/v<schema version>/<scenario>.jsonl: one JSON
// line per message of the stream (its body, and its headers as the server
// returns them, Nats-Sequence and Nats-Subject included). The events
// package decodes them, and projections/replay reads and re-drives them to
// "identical", on every change.
//
//	go run ./test/recordlogs               # rewrites events/testdata/v<SchemaVersion>
//	go run ./test/recordlogs -out DIR      # elsewhere
//
// Record again only with a deliberate change of what the loop commits;
// logs recorded by earlier builds stay, under a directory of their own,
// as what this build must still read.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/storetest"
)

func main() {
	out := flag.String("out", filepath.Join("events", "testdata", "v"+strconv.Itoa(events.SchemaVersion)), "directory to write the logs to")
	flag.Parse()
	if err := record(context.Background(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "recordlogs:", err)
		os.Exit(1)
	}
}

// scenarios are the crash matrix's scenarios recorded: a completion with
// run_js and kv, children (spawn, wait, get, cancel), a rejected then
// accepted completion, and a needs_input reply.
func scenarios() []runtimetest.Scenario { return runtimetest.Scenarios()[:4] }

// record writes one log per scenario to dir.
func record(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, sc := range scenarios() {
		if err := recordOne(ctx, sc, filepath.Join(dir, sc.Name+".jsonl"), false); err != nil {
			return fmt.Errorf("%s: %w", sc.Name, err)
		}
	}
	if events.SchemaVersion < events.PurgeVersion {
		return nil
	}
	// A purged session: what is left of one (its marker), in a directory
	// of its own, since there is nothing left to re-drive.
	purged := dir + "-purged"
	if err := os.MkdirAll(purged, 0o755); err != nil {
		return err
	}
	sc := scenarios()[3]
	if err := recordOne(ctx, sc, filepath.Join(purged, sc.Name+".jsonl"), true); err != nil {
		return fmt.Errorf("%s, purged: %w", sc.Name, err)
	}
	return nil
}

// recordOne drives sc on a fresh server and writes the stream to path;
// with purge, after the session's purge (as a node's retention makes it).
func recordOne(ctx context.Context, sc runtimetest.Scenario, path string, purge bool) (err error) {
	tmp, err := os.MkdirTemp("", "cairn-record-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: tmp, Port: -1})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.Close(context.WithoutCancel(ctx))) }()
	nc, err := srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := jetstream.New(ctx, nc, jetstream.Config{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, store.Close(context.WithoutCancel(ctx))) }()
	// The host reports a failed expectation through testing.TB: here it
	// ends the recording with an error.
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			err = errors.Join(err, errors.New(string(f)))
		}
	}()
	if purge {
		// A node's run has its record first (what the marker lists of it:
		// agent, owner, creation).
		rec := events.Run{SessionID: "s1", RunID: "r1", RootRunID: "r1", Agent: "recorder", Owner: "local", Message: "go"}
		if _, err := store.CreateRun(ctx, rec, 0, time.Now()); err != nil {
			return err
		}
	}
	var opener storetest.Opener = store
	if events.SchemaVersion >= events.LedgerVersion && !sc.Spawns() {
		// A root run with no subagents keeps its budget in its commits
		// (actors): recorded so, its commits carry the totals.
		opener = charging{store}
	}
	h := runtimetest.NewHost(tb{}, opener, sc.Steps...)
	if sc.Setup != nil {
		sc.Setup(h)
	}
	if _, err := h.Drive(5, nil); err != nil {
		return fmt.Errorf("drive: %w", err)
	}
	if purge {
		if err := purgeSession(ctx, store, "s1"); err != nil {
			return err
		}
	}
	js, err := njs.New(nc)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	enc := json.NewEncoder(f)
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, njs.ErrMsgNotFound) && purge {
			continue // purged
		}
		if err != nil {
			return fmt.Errorf("seq %d: %w", seq, err)
		}
		hdr := map[string]string{}
		for k := range m.Header {
			hdr[k] = m.Header.Get(k)
		}
		if err := enc.Encode(map[string]any{"subject": m.Subject, "headers": hdr, "body": json.RawMessage(m.Data)}); err != nil {
			return err
		}
	}
	return nil
}

// tb is the testing.TB the scripted host reports to outside a test: a
// fatal report panics with a failure, which recordOne turns into its error.
// The host calls nothing else of it (the embedded nil TB would panic).
type tb struct{ testing.TB }

type failure string

func (tb) Helper()                           {}
func (tb) Logf(string, ...any)               {}
func (tb) Fatal(args ...any)                 { panic(failure(fmt.Sprint(args...))) }
func (tb) Fatalf(format string, args ...any) { panic(failure(fmt.Sprintf(format, args...))) }

// purgeSession purges a session as the retention sweeper does: its
// marker, fenced on its last sequence, then the rest.
func purgeSession(ctx context.Context, store *jetstream.Store, session string) error {
	sl, err := store.ReadSession(ctx, session)
	if err != nil {
		return err
	}
	if sl == nil {
		return fmt.Errorf("purge: session %s has no events", session)
	}
	p := events.Purge{Runs: sl.Runs, Before: sl.Last, Events: sl.Events, Bytes: sl.Bytes, Objects: sl.Objects, Retention: (30 * 24 * time.Hour).String(), Holder: "recordlogs"}
	marker, err := store.WritePurge(ctx, session, p, sl.LastTime.Add(30*24*time.Hour))
	if err != nil {
		return err
	}
	return store.FinishPurge(ctx, session, marker, p.Objects)
}

// charging opens runs whose commits carry their budget totals as a node's
// root run with no subagents keeps them: a step reserved by each commit
// that leaves the run in the model phase, a response's tokens by its
// commit.
type charging struct{ s *jetstream.Store }

func (c charging) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	rs, err := c.s.Open(ctx, sessionID, runID)
	if err != nil {
		return nil, err
	}
	rs.(*jetstream.RunStore).SetLedger(counter{})
	return rs, nil
}

type counter struct{}

func (counter) Charge(cp *runtime.Checkpoint, last *events.Ledger) *events.Ledger {
	var t events.Ledger
	if last != nil {
		t = *last
	}
	if cp.Usage != nil {
		t.InputTokens += cp.Usage.InputTokens
		t.OutputTokens += cp.Usage.OutputTokens
	}
	if cp.Reply == nil && cp.Phase == runtime.PhaseModel {
		t.Steps++
	}
	return &t
}

func (counter) Charged(*runtime.Checkpoint, *events.Ledger) {}
