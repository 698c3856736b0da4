package replay_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/faults"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// scoped gives each host its own session on a shared stream.
type scoped struct {
	s      *jetstream.Store
	prefix string
}

func (o scoped) Open(ctx context.Context, sessionID, runID string) (runtime.Store, error) {
	return o.s.Open(ctx, o.prefix+sessionID, runID)
}

type logEnv struct {
	srv *jetstream.Server
	js  njs.JetStream
	s   *jetstream.Store
	n   atomic.Int64
}

func newEnv(t *testing.T) *logEnv {
	t.Helper()
	srv := natstest.Server(t)
	nc := natstest.Connect(t, srv)
	s, err := jetstream.New(context.Background(), nc, jetstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := njs.New(nc)
	return &logEnv{srv: srv, js: js, s: s}
}

// driven runs the first scenario to its end on the log and returns its
// host and its history as the log holds it.
func (e *logEnv) driven(t *testing.T) (*runtimetest.Host, *replay.History) {
	t.Helper()
	h, session := e.host(t, runtimetest.Scenarios()[0])
	if _, err := h.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	hist, err := replay.LoadIn(context.Background(), replay.Source{JS: e.js}, session, h.Run)
	if err != nil {
		t.Fatal(err)
	}
	return h, hist
}

func (e *logEnv) host(t *testing.T, sc runtimetest.Scenario) (*runtimetest.Host, string) {
	prefix := fmt.Sprintf("t%d-", e.n.Add(1))
	h := runtimetest.NewHost(t, scoped{s: e.s, prefix: prefix}, sc.Steps...)
	h.Ctrl.Steps = sc.Budget
	if sc.Setup != nil {
		sc.Setup(h)
	}
	return h, prefix + h.Session
}

func setup(h *runtimetest.Host) replay.Setup {
	return replay.Setup{Definition: h.Def, Subagents: h.Subs, Capabilities: h.Caps, Limits: h.Limits, Redactor: h.Redact}
}

// countWrites counts what the re-drive must reproduce: the run's commits
// and compactions, and its leases (attempts).
func countWrites(hist *replay.History) (writes, leases int) {
	for _, e := range hist.Events {
		switch {
		case e.Type == events.LeaseAcquired && e.RunID == hist.RunID:
			leases++
		case e.Type == events.CheckpointCommitted && e.RunID == hist.RunID, e.Type == events.WindowCompacted:
			writes++
		}
	}
	return writes, leases
}

// Re-driving every run of the crash matrix (every scenario, with a store
// fault before and after each store operation, recovered attempt by
// attempt) reproduces the logged commits and compactions exactly, with no
// model, capability or controller behind it.
func TestRedriveReproducesCrashMatrix(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	for _, sc := range runtimetest.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			cases := 0
			for i := -1; ; i++ {
				fired := false
				for _, mode := range []faults.Mode{faults.Before, faults.After} {
					if i < 0 && mode == faults.After {
						continue
					}
					h, session := env.host(t, sc)
					if i >= 0 {
						h.Faults.Set(faults.At(i, mode))
					}
					_, _ = h.Drive(20, runtimetest.ErrBudgetExhausted)
					fired = fired || h.Faults.Hit()
					h.Faults.Set(nil)
					hist, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, session, h.Run)
					if err != nil {
						t.Fatalf("op %d %s: %v", i, mode, err)
					}
					rep, err := replay.Redrive(ctx, hist, 0, setup(h))
					if err != nil {
						t.Fatalf("op %d %s: %v", i, mode, err)
					}
					writes, leases := countWrites(hist)
					if !rep.Exact() || rep.Logged != writes || rep.Attempts != leases {
						t.Fatalf("op %d %s: re-drive %d/%d writes over %d attempts (log: %d writes, %d leases); divergence %+v; attempts ended %q",
							i, mode, rep.Reproduced, rep.Logged, rep.Attempts, writes, leases, rep.Divergence, rep.Errors)
					}
					cases++
				}
				if i >= 0 && !fired {
					break
				}
			}
			t.Logf("%d runs re-driven exactly", cases)
		})
	}
}

// A re-drive with a model that answers differently is caught at the first
// commit that differs, and the report names the revision and the fields.
func TestRedriveReportsDivergence(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	h, hist := env.driven(t) // scenario 0: two run_js calls, then complete
	// Tamper with the logged tool result of call c2 in memory: the re-drive
	// serves it, and the commit that carries it no longer matches.
	for i := range hist.Commits {
		for j := range hist.Commits[i].Checkpoint.Append {
			for k := range hist.Commits[i].Checkpoint.Append[j].Parts {
				if tr := hist.Commits[i].Checkpoint.Append[j].Parts[k].ToolResult; tr != nil && tr.CallID == "c2" {
					tr.Content = `{"result":99}`
				}
			}
		}
	}
	rep, err := replay.Redrive(ctx, hist, 0, setup(h))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Exact() || rep.Divergence == nil {
		t.Fatalf("a tampered log re-drove exactly: %+v", rep)
	}
	if d := rep.Divergence; d.Revision == 0 || len(d.Fields) == 0 {
		t.Fatalf("divergence without a revision or fields: %+v", d)
	}
}

// A wrong contract (another definition) is an error, not a divergence.
func TestRedriveWrongContract(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	h, hist := env.driven(t) // scenario 0: two run_js calls, then complete
	s := setup(h)
	s.Definition.Instructions = "Something else."
	// From the last revision but one: the run is resumed, so the
	// checkpoint's contract is checked.
	if _, err := replay.Redrive(ctx, hist, hist.Last()-1, s); err == nil {
		t.Fatal("re-drive with another definition did not fail")
	}
}

// The usage each response commit carries is served back by the re-drive
// (else the re-driven commits would differ from the logged ones) and
// summed by the history's budget.
func TestRedriveServesUsageAndBudgetCountsIt(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	sc := runtimetest.Scenarios()[0]
	sc.Steps = append([]model.Response(nil), sc.Steps...)
	var want model.Usage
	for i := range sc.Steps {
		sc.Steps[i].Usage = model.Usage{InputTokens: int64(100 * (i + 1)), OutputTokens: int64(10 * (i + 1))}
		want = want.Add(sc.Steps[i].Usage)
	}
	h, session := env.host(t, sc)
	if _, err := h.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	hist, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, session, h.Run)
	if err != nil {
		t.Fatal(err)
	}
	if got := hist.Usage(0).Tokens; got != want {
		t.Fatalf("budget tokens %+v, want %+v", got, want)
	}
	rep, err := replay.Redrive(ctx, hist, 0, setup(h))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() {
		t.Fatalf("re-drive of a log with usage differs: %+v", rep.Divergence)
	}
}

// failingFirst reports failed requests to the trace before each of its
// first answers, as a provider's retry loop does.
type failingFirst struct {
	m model.Model
	n int
}

func (f *failingFirst) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	f.n++
	if f.n <= 2 {
		model.ReportFailure(ctx, model.Failure{Provider: "openai", Model: "m", Attempt: 1, Status: 503, Class: model.FailureStatus,
			Error: "overloaded near s3cr3t", Retry: true, RetryIn: time.Second, At: time.Unix(int64(100*f.n), 0).UTC()})
	}
	return f.m.Generate(ctx, req)
}

// A log whose response commits hold failed provider requests re-drives
// exactly: the recorded model reports them again. Before, every such run
// diverged at its first retried step ("the commit differs":
// model_failures).
func TestRedriveReproducesModelFailures(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	sc := runtimetest.Scenarios()[0]
	h, session := env.host(t, sc)
	h.WrapModel = func(m model.Model) model.Model { return &failingFirst{m: m} }
	if _, err := h.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
	hist, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, session, h.Run)
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	for _, c := range hist.Commits {
		failures += len(c.Checkpoint.ModelFailures)
	}
	if failures == 0 {
		t.Fatal("the log holds no model failure: the test tests nothing")
	}
	rep, err := replay.Redrive(ctx, hist, 0, setup(h))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() {
		t.Fatalf("re-drive of a log with model failures differs: %+v", rep.Divergence)
	}
}

// A run long enough that its log lists most revisions' used call IDs on a
// base (more than 64 IDs: a full listing mid-run, then revisions on it)
// is read whole: its last state has every ID in order, and a re-drive
// reproduces every commit exactly, used call IDs included.
func TestRedriveLongRunUsedCallIDs(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	var steps []model.Response
	var want []string
	for s := 0; s < 9; s++ {
		var parts []model.Part
		for i := 0; i < 10; i++ {
			id := fmt.Sprintf("toolu_%d_%d", s, i)
			want = append(want, id)
			parts = append(parts, model.Call(id, "run_js", `{"code":"return 1"}`))
		}
		steps = append(steps, model.Reply(parts...))
	}
	want = append(want, "done")
	steps = append(steps, model.Reply(model.Call("done", "complete", `{"type":"output","output":{"answer":"ok"}}`)))
	h, session := env.host(t, runtimetest.Scenario{Name: "long", Steps: steps})
	if _, err := h.Drive(5, nil); err != nil {
		t.Fatal(err)
	}
	hist, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, session, h.Run)
	if err != nil {
		t.Fatal(err)
	}
	last := hist.Commits[len(hist.Commits)-1].Checkpoint
	if strings.Join(last.UsedCallIDs, ",") != strings.Join(want, ",") {
		t.Fatalf("last commit's used call IDs: %d, want %d: %v", len(last.UsedCallIDs), len(want), last.UsedCallIDs)
	}
	rep, err := replay.Redrive(ctx, hist, 0, setup(h))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Exact() {
		t.Fatalf("re-drive %d/%d: divergence %+v", rep.Reproduced, rep.Logged, rep.Divergence)
	}
}
