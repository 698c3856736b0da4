package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// fakeLog is a log of sessions as the Sweeper sees it: a purge marker is
// fenced on the session's last sequence, and finishing leaves the marker.
type fakeLog struct {
	sessions map[string]*cjs.SessionLog
	ended    map[string]bool // run IDs of parents that ended
	seq      uint64
	// failFinish fails the next FinishPurge calls before anything is
	// removed, failObjects after the events are removed but before the
	// objects are.
	failFinish, failObjects int
	calls                   []string
	reads                   map[string]int
}

func newFakeLog() *fakeLog {
	return &fakeLog{sessions: map[string]*cjs.SessionLog{}, ended: map[string]bool{}, reads: map[string]int{}}
}

// add makes a session of runs, each ended (or not) at t.
func (f *fakeLog) add(id string, t time.Time, runs ...events.PurgedRun) {
	f.seq += uint64(2 * len(runs))
	f.sessions[id] = &cjs.SessionLog{SessionID: id, Runs: runs, Last: f.seq, LastTime: t, Events: 2 * len(runs), Bytes: int64(100 * len(runs)), Objects: []string{id + ".blob"}}
}

func (f *fakeLog) ReadSession(_ context.Context, id string) (*cjs.SessionLog, error) {
	f.reads[id]++
	s := f.sessions[id]
	if s == nil {
		return nil, nil
	}
	c := *s
	c.Runs = slices.Clone(s.Runs)
	return &c, nil
}

func (f *fakeLog) RunFinished(_ context.Context, _, runID string) (bool, error) {
	return f.ended[runID], nil
}

func (f *fakeLog) WritePurge(_ context.Context, id string, p events.Purge, _ time.Time) (uint64, error) {
	s := f.sessions[id]
	if s == nil || s.Last != p.Before {
		return 0, fmt.Errorf("session %s moved on: %w", id, runtime.ErrConflict)
	}
	f.seq++
	s.Last, s.Purge, s.PurgeSeq = f.seq, &p, f.seq
	s.Events++
	f.calls = append(f.calls, "marker "+id)
	return f.seq, nil
}

func (f *fakeLog) FinishPurge(_ context.Context, id string, marker uint64, objects []string) error {
	if f.failFinish > 0 {
		f.failFinish--
		return errors.New("NATS is out")
	}
	s := f.sessions[id]
	if s.PurgeSeq != marker {
		return fmt.Errorf("finish %s at %d: the marker is at %d", id, marker, s.PurgeSeq)
	}
	// The objects first, then the events, as the store does.
	if f.failObjects > 0 {
		f.failObjects--
		return errors.New("the object store is out")
	}
	s.Objects = nil
	s.Events = 1
	f.calls = append(f.calls, fmt.Sprintf("finish %s %v", id, objects))
	return nil
}

// fakeIndex lists what the log holds, as the run index would; while
// rebuilding (at a node's start) it lists nothing until CatchUp.
type fakeIndex struct {
	log        *fakeLog
	rebuilding *bool
}

func (x fakeIndex) CatchUp(context.Context) error {
	if x.rebuilding != nil {
		*x.rebuilding = false
	}
	return nil
}

func (x fakeIndex) Finished(cutoff func(agent string) (time.Time, bool)) []string {
	if x.rebuilding != nil && *x.rebuilding {
		return nil
	}
	var out []string
	for id, s := range x.log.sessions {
		before, ok := cutoff(s.Runs[0].Agent)
		if s.Purge != nil || !ok || s.LastTime.After(before) {
			continue
		}
		if !slices.ContainsFunc(s.Runs, func(r events.PurgedRun) bool { return r.Status == "" }) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (x fakeIndex) PurgedSessions() []string {
	if x.rebuilding != nil && *x.rebuilding {
		return nil
	}
	var out []string
	for id, s := range x.log.sessions {
		if s.Purge != nil {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func sweeper(t *testing.T, log *fakeLog, now *time.Time, mut func(*Config)) (*Sweeper, *[]string) {
	t.Helper()
	var forgot []string
	cfg := Config{Policy: Policy{Default: time.Hour}, Store: log, Index: fakeIndex{log: log}, Logger: quiet, Holder: "n1",
		Now: func() time.Time { return *now },
		Forget: func(_ context.Context, s string, runs []events.PurgedRun) error {
			for _, r := range runs {
				forgot = append(forgot, s+"/"+r.RunID)
			}
			return nil
		}}
	if mut != nil {
		mut(&cfg)
	}
	w, err := NewSweeper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w, &forgot
}

func done(id string, t time.Time) events.PurgedRun {
	return events.PurgedRun{RunID: id, Agent: "a", Status: "completed", Ended: t}
}

func TestSweepPurgesWhatIsDue(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	log := newFakeLog()
	log.add("due", t0, done("r1", t0), done("r2", t0))
	log.add("recent", t0.Add(50*time.Minute), done("r3", t0.Add(50*time.Minute)))
	log.add("running", t0, done("r4", t0), events.PurgedRun{RunID: "r5", Agent: "a"})
	last := log.sessions["due"].Last
	now := t0.Add(time.Hour)
	w, forgot := sweeper(t, log, &now, nil)
	rep, err := w.Sweep(context.Background())
	if err != nil || rep.Purged != 1 || rep.Failed != 0 || rep.Events != 4 || rep.Bytes != 200 {
		t.Fatalf("Sweep = %+v, %v; want one session of 4 events purged", rep, err)
	}
	s := log.sessions["due"]
	if s.Purge == nil || s.Purge.Before != last || len(s.Purge.Runs) != 2 || s.Purge.Holder != "n1" || s.Purge.Retention != "1h0m0s" || s.Events != 1 {
		t.Fatalf("due session: %+v, marker %+v; want its marker alone, fenced on its last sequence", s, s.Purge)
	}
	if want := []string{"marker due", "finish due [due.blob]"}; !slices.Equal(log.calls, want) {
		t.Fatalf("calls %q, want %q (the marker first)", log.calls, want)
	}
	if want := []string{"due/r1", "due/r2"}; !slices.Equal(*forgot, want) {
		t.Fatalf("forgot %q, want %q", *forgot, want)
	}
	// The next sweep has nothing more to do.
	log.calls = nil
	if rep, err := w.Sweep(context.Background()); err != nil || rep != (Report{}) || len(log.calls) != 0 {
		t.Fatalf("second Sweep = %+v, %v, calls %q; want nothing done", rep, err, log.calls)
	}
}

// A continuation written between the read and the marker wins: the marker
// is refused by its fence, and the session is kept without a failure.
func TestSweepKeepsASessionThatMovedOn(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	log := newFakeLog()
	log.add("s", t0, done("r1", t0))
	now := t0.Add(2 * time.Hour)
	racing := &racingLog{fakeLog: log}
	w, forgot := sweeper(t, log, &now, func(c *Config) { c.Store = racing })
	rep, err := w.Sweep(context.Background())
	if err != nil || rep.Purged != 0 || rep.Failed != 0 {
		t.Fatalf("Sweep = %+v, %v; want nothing purged, nothing failed", rep, err)
	}
	if s := log.sessions["s"]; s.Purge != nil || len(*forgot) != 0 {
		t.Fatalf("the session moved on, yet: marker %+v, forgot %q", s.Purge, *forgot)
	}
}

// racingLog writes a continuation into the session after each read.
type racingLog struct{ *fakeLog }

func (r *racingLog) ReadSession(ctx context.Context, id string) (*cjs.SessionLog, error) {
	s, err := r.fakeLog.ReadSession(ctx, id)
	if live := r.sessions[id]; live != nil {
		r.seq++
		live.Last = r.seq
		live.Runs = append(live.Runs, events.PurgedRun{RunID: "continued", Agent: "a"})
	}
	return s, err
}

// A purge that stopped after its marker is finished by the next sweep, and
// by a new Sweeper (a restarted node) from the index's purged sessions.
func TestSweepFinishesAPurgeStoppedHalfWay(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			log := newFakeLog()
			log.add("s", t0, done("r1", t0))
			log.failFinish = 1
			now := t0.Add(2 * time.Hour)
			w, _ := sweeper(t, log, &now, nil)
			rep, err := w.Sweep(context.Background())
			if err != nil || rep.Failed != 1 || rep.Purged != 0 || log.sessions["s"].Purge == nil || log.sessions["s"].Events != 3 {
				t.Fatalf("Sweep = %+v, %v, session %+v; want the marker written and the finish failed", rep, err, log.sessions["s"])
			}
			if restart {
				// A restarted node's index is rebuilt from the log: the
				// sweep waits for it before it audits.
				rebuilding := true
				w, _ = sweeper(t, log, &now, func(c *Config) { c.Index = fakeIndex{log: log, rebuilding: &rebuilding} })
			}
			rep, err = w.Sweep(context.Background())
			if err != nil || rep.Finished != 1 || rep.Failed != 0 || log.sessions["s"].Events != 1 {
				t.Fatalf("next Sweep = %+v, %v, session %+v; want the purge finished", rep, err, log.sessions["s"])
			}
			if rep, _ := w.Sweep(context.Background()); rep != (Report{}) {
				t.Fatalf("third Sweep = %+v; want nothing left", rep)
			}
		})
	}
}

func TestSweepWaitsForTheParent(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	log := newFakeLog()
	c := done("c1", t0)
	c.ParentRunID, c.ParentSessionID = "p1", "ps"
	log.add("child", t0, c)
	now := t0.Add(2 * time.Hour)
	w, _ := sweeper(t, log, &now, nil)
	if rep, _ := w.Sweep(context.Background()); rep.Purged != 0 {
		t.Fatalf("Sweep = %+v; want the child's session kept while its parent may continue it", rep)
	}
	log.ended["p1"] = true
	now = now.Add(keepFor * 6 * time.Minute) // the default interval: a tenth of the 1 h retention
	if rep, _ := w.Sweep(context.Background()); rep.Purged != 1 {
		t.Fatalf("Sweep = %+v; want the child's session purged once its parent ended", rep)
	}
}

func TestSweepPurgesNothingUnlessAllowed(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for name, mut := range map[string]func(*Config){
		"a member reads an older schema": func(c *Config) { c.Writable = func() bool { return false } },
		"another member's session":       func(c *Config) { c.Mine = func(string) bool { return false } },
		"kept forever":                   func(c *Config) { c.Policy = Policy{} },
		"an agent kept forever":          func(c *Config) { c.Policy.Agents = map[string]time.Duration{"a": 0, "b": time.Minute} },
	} {
		t.Run(name, func(t *testing.T) {
			log := newFakeLog()
			log.add("s", t0, done("r1", t0))
			now := t0.Add(100 * 24 * time.Hour)
			w, _ := sweeper(t, log, &now, mut)
			if rep, err := w.Sweep(context.Background()); err != nil || rep != (Report{}) || log.sessions["s"].Purge != nil {
				t.Fatalf("Sweep = %+v, %v; want nothing purged", rep, err)
			}
		})
	}
}

func TestNewSweeperRefusesBadConfig(t *testing.T) {
	log := newFakeLog()
	for name, cfg := range map[string]Config{
		"no store":           {Index: fakeIndex{log: log}},
		"no index":           {Store: log},
		"negative default":   {Store: log, Index: fakeIndex{log: log}, Policy: Policy{Default: -time.Hour}},
		"negative for agent": {Store: log, Index: fakeIndex{log: log}, Policy: Policy{Agents: map[string]time.Duration{"a": -1}}},
	} {
		if _, err := NewSweeper(cfg); err == nil {
			t.Errorf("%s: NewSweeper accepted it", name)
		}
	}
}

// A purge whose objects could not be removed is finished by the next
// sweep, also when the audit found it (after a restart) and failed again;
// and once done, an audit finds nothing to do (the marker alone means
// nothing is left), however often it runs.
func TestSweepFinishesWhatAnAuditFinds(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	log := newFakeLog()
	log.add("s", t0, done("r1", t0))
	log.failObjects = 2
	now := t0.Add(2 * time.Hour)
	w, _ := sweeper(t, log, &now, nil)
	if rep, _ := w.Sweep(context.Background()); rep.Failed != 1 || log.sessions["s"].Events != 3 || len(log.sessions["s"].Objects) != 1 {
		t.Fatalf("Sweep = %+v, session %+v; want the marker written, nothing removed", rep, log.sessions["s"])
	}
	w, forgot := sweeper(t, log, &now, nil) // a restart: its audit finds the purge, and fails once more
	if rep, _ := w.Sweep(context.Background()); rep.Failed != 1 {
		t.Fatalf("the audit's Sweep = %+v; want the finish failed again", rep)
	}
	if rep, _ := w.Sweep(context.Background()); rep.Finished != 1 || len(log.sessions["s"].Objects) != 0 || log.sessions["s"].Events != 1 {
		t.Fatalf("next Sweep = %+v, session %+v; want the purge finished", rep, log.sessions["s"])
	}
	calls := len(log.calls)
	for range 3 { // restarts: each audits, none redoes anything
		w, forgot = sweeper(t, log, &now, nil)
		if rep, _ := w.Sweep(context.Background()); rep != (Report{}) {
			t.Fatalf("an audit after the purge finished = %+v; want nothing done", rep)
		}
	}
	if len(log.calls) != calls || len(*forgot) != 0 {
		t.Fatalf("after the purge finished: calls %q, forgot %q; want nothing more", log.calls[calls:], *forgot)
	}
}

// A Sweeper closed before it started, or started twice, neither hangs
// nor panics.
func TestSweeperCloseWithoutStart(t *testing.T) {
	now := time.Now()
	w, _ := sweeper(t, newFakeLog(), &now, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close before Start: %v", err)
	}
	w.Start() // after Close: nothing runs
	w2, _ := sweeper(t, newFakeLog(), &now, func(c *Config) { c.Policy = Policy{} })
	w2.Start()
	w2.Start()
	if err := w2.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// A purge another member left half way is finished by the member the
// session is placed on once the topology changes.
func TestSweepAuditsAgainWhenTheTopologyChanges(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	log := newFakeLog()
	log.add("s", t0, done("r1", t0))
	log.failFinish = 1
	now := t0.Add(2 * time.Hour)
	other, _ := sweeper(t, log, &now, nil)
	if rep, _ := other.Sweep(context.Background()); rep.Failed != 1 || log.sessions["s"].Purge == nil {
		t.Fatalf("the first member's Sweep = %+v; want the marker written, the rest not", rep)
	}
	// That member is gone; this one owned nothing of it, and now does.
	topo, mine := uint64(1), false
	w, _ := sweeper(t, log, &now, func(c *Config) {
		c.Topology = func() uint64 { return topo }
		c.Mine = func(string) bool { return mine }
	})
	if rep, _ := w.Sweep(context.Background()); rep != (Report{}) {
		t.Fatalf("Sweep = %+v; want nothing done: the session is another member's", rep)
	}
	topo, mine = 2, true
	if rep, _ := w.Sweep(context.Background()); rep.Finished != 1 || log.sessions["s"].Events != 1 {
		t.Fatalf("Sweep after the topology changed = %+v; want the purge finished", rep)
	}
}

// A session kept for a parent that may continue it is read again only
// after keepFor intervals, not at every sweep (each read is the session's
// whole log).
func TestSweepReadsAKeptSessionLater(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	log := newFakeLog()
	c := done("c1", t0)
	c.ParentRunID, c.ParentSessionID = "p1", "ps"
	log.add("child", t0, c)
	now := t0.Add(2 * time.Hour)
	w, _ := sweeper(t, log, &now, func(c *Config) { c.Interval = time.Minute })
	for range 5 {
		if _, err := w.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	if log.reads["child"] != 1 {
		t.Fatalf("reads over 5 sweeps: %v; want the kept session read once", log.reads)
	}
	now = now.Add(keepFor * time.Minute)
	log.ended["p1"] = true
	if rep, _ := w.Sweep(context.Background()); rep.Purged != 1 || log.reads["child"] != 2 {
		t.Fatalf("Sweep after keepFor intervals = %+v, reads %v; want the child's session read again and purged", rep, log.reads)
	}
}
