package actors_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// A run whose log holds an event of a schema newer than this build reads
// (a node rolled back past the build that wrote it) parks, with the
// reason the node reports (Unreadable) and an error log line: it is
// neither failed after its retries nor misread, however often it is woken
// (here by each of its children's ends). Before, the decode error was a
// transient failure and the run failed after MaxRetries.
func TestRunOfANewerSchemaParks(t *testing.T) {
	g := &gate{}
	nc := natstest.Connect(t, natstest.Server(t))
	p := &parked{}
	h := &harness{nc: nc, parent: threeChildren(), child: childModel{g: g}, maxRetries: 1, sink: p.sink}
	n1 := h.start(t)
	sess, run, err := n1.Run(context.Background(), "planner", "Outlive a newer build.")
	if err != nil {
		t.Fatal(err)
	}
	g.release(`{"n":1}`)
	cs, cr := actors.ChildIDs(run, "a")
	result(t, n1, cs, cr)
	// Every child spawned (the parent parked on them) before the newer
	// build's commit: a parent parked unread spawns nothing more. Closing
	// at child a's end left child c unspawned when a's run was quicker
	// than the parent's third spawn, and the test waited for it forever.
	waitParked(t, p, run)
	closeNode(t, n1)
	h.sink = nil

	// A newer build wrote the run's last commit.
	body := fmt.Sprintf(`{"type":"cairn.checkpoint.committed","version":%d,"session_id":%q,"run_id":%q,"revision":99,"epoch":9,"time":"2026-12-02T00:00:00Z","data":{"checkpoint":{"revision":99},"a_field_of_tomorrow":1}}`,
		events.SchemaVersion+1, sess, run)
	if err := nc.Publish(events.CheckpointSubject(sess, run, false), []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	parked := make(chan struct{}, 64)
	var parks atomic.Int32
	h.log = onEveryLog{msg: "run parked unread", errText: "unknown schema version", fn: func() {
		parks.Add(1)
		select {
		case parked <- struct{}{}:
		default:
		}
	}}
	n2 := h.start(t)
	defer closeNode(t, n2)
	waitEvent(t, parked, "the run parked unread at the restart's sweep")
	for i, child := range []string{`{"n":2}`, `{"n":3}`} {
		g.release(child)
		cs, cr := actors.ChildIDs(run, string(rune('b'+i)))
		result(t, n2, cs, cr)
		waitEvent(t, parked, "the run parked unread again, woken by its child")
	}
	// Parked once per wake (the restart's sweep, each child's end, maybe
	// a redelivery or a periodic sweep), never in a loop of attempts.
	if n := parks.Load(); n > 8 {
		t.Fatalf("the run parked %d times for 3 wakes: it is attempted again and again", n)
	}
	why, ok := n2.Unreadable(run)
	if !ok || why == "" {
		t.Fatalf("Unreadable(%s) = %q, %v; want the reason", run, why, ok)
	}
	st, _, errText, err := n2.Status(context.Background(), sess, run)
	if err != nil || st != runtime.StatusRunning {
		t.Fatalf("status %s (%q), %v; want running: neither failed nor ended", st, errText, err)
	}
	// Its budget still reads (the run view shows it): a planner keeps it
	// whole in the budgets bucket, and the log's unreadable last commit
	// has nothing to add. Before, Usage read the log first and failed.
	steps, _, _, err := n2.Usage(context.Background(), run)
	if err != nil || steps < 1 {
		t.Fatalf("Usage(%s) = %d steps, %v; want the bucket's entry (at least the step that spawned)", run, steps, err)
	}
}

// onEveryLog calls fn for every record whose message contains msg with
// an err attribute containing errText.
type onEveryLog struct {
	msg, errText string
	fn           func()
}

func (h onEveryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h onEveryLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h onEveryLog) WithGroup(string) slog.Handler            { return h }
func (h onEveryLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" && strings.Contains(a.Value.String(), h.errText) {
				h.fn()
			}
			return true
		})
	}
	return nil
}
