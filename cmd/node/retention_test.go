package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// A node with a short retention purges a finished session (and its
// children's, once their parent ended): its run reads "purged" with how it
// had ended, what is gone answers 410, the log keeps the marker alone of
// the session, its kv entries and budget are gone, and a restarted node
// (an index rebuilt from the log) still says purged.
func TestRetentionPurgesFinishedSessions(t *testing.T) {
	dir := t.TempDir()
	o := serveOptions{nodeOptions: nodeOptions{agentsDir: "../../examples/agents", data: dir, logger: slog.New(slog.DiscardHandler)},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice"}, retention: retentionFlag(time.Second), retentionSweep: 50 * time.Millisecond}
	base, stop := startServe(t, o)
	status, started := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if status != 201 {
		t.Fatalf("start: %d %v", status, started)
	}
	run, session := started["run_id"].(string), started["session_id"].(string)
	sse(t, base, "alice-token", run) // to its end
	_, shown := call(t, "GET", base+"/v1/runs/"+run, "alice-token", "")
	kids, _ := shown["children"].([]any)
	if shown["status"] != "completed" || len(kids) == 0 {
		t.Fatalf("show before the purge: %v", shown)
	}
	purged := func(id string) map[string]any {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second) // generous: sweeps run every 50 ms once the run is a second old
		for {
			status, got := call(t, "GET", base+"/v1/runs/"+id, "alice-token", "")
			if status == 200 && got["status"] == "purged" {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s not purged: %d %v", id, status, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	got := purged(run)
	if got["ended_as"] != "completed" || got["purged"] == nil || got["session_id"] != session {
		t.Fatalf("purged run: %v", got)
	}
	for _, k := range kids {
		purged(k.(map[string]any)["run_id"].(string))
	}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/view", ""}, {"GET", "/transcript", ""}, {"GET", "/events", ""},
		{"POST", "/continue", `{"message":"and from the Moon?"}`}, {"POST", "/cancel", "{}"}, {"POST", "/redrive", `{"at":0}`},
	} {
		status, body := call(t, tc.method, base+"/v1/runs/"+run+tc.path, "alice-token", tc.body)
		if e, _ := body["error"].(map[string]any); status != 410 || e["code"] != "purged" {
			t.Errorf("%s %s of a purged run: %d %v; want 410 purged", tc.method, tc.path, status, body)
		}
	}
	_, listed := call(t, "GET", base+"/v1/runs?status=purged", "alice-token", "")
	if runs, _ := listed["runs"].([]any); len(runs) != 1 || runs[0].(map[string]any)["run_id"] != run {
		t.Fatalf("purged runs listed: %v", listed)
	}
	// The sweep that purged it counts it once it is done.
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if regexp.MustCompile(`cairn_runs\{status="purged"\} [1-9]`).Match(metrics) && regexp.MustCompile(`cairn_sessions_purged_total [1-9]`).Match(metrics) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics count no purged run or session:\n%s", metrics)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The run's page says so.
	load := headlessChromium(t, 10*time.Second)
	dom := string(load(base+"/ui/runs/"+run+"#token=alice-token", "--dump-dom"))
	for _, want := range []string{`data-rendered="purged"`, "status purged (ended completed", "its session's retention ran out"} {
		if !strings.Contains(dom, want) {
			t.Fatalf("the purged run's page lacks %q:\n%.3000s", want, dom)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// What the log and the buckets hold of the session now.
	nc, closeNATS, err := connect(nodeOptions{data: dir})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := njs.New(nc)
	count := func(stream, filter string) int {
		t.Helper()
		st, err := js.Stream(context.Background(), stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(context.Background(), njs.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range info.State.Subjects {
			n += int(c)
		}
		return n
	}
	if n := count("CAIRN", events.SessionAll(session)); n != 1 {
		t.Errorf("the purged session holds %d events, want its marker alone", n)
	}
	if n := count("CAIRN", events.SessionPurgedSubject(session)); n != 1 {
		t.Errorf("the purged session has %d markers, want 1", n)
	}
	if n := count("KV_cairn_kv", "$KV.cairn_kv."+session+".>"); n != 0 {
		t.Errorf("the purged session's kv holds %d entries, want none", n)
	}
	if n := count("KV_cairn_budgets", "$KV.cairn_budgets."+run); n != 0 {
		t.Errorf("the purged run's budget holds %d entries, want none", n)
	}
	if n := count("KV_cairn_children", "$KV.cairn_children."+run+".>"); n != 0 {
		t.Errorf("the purged run's children bucket holds %d entries, want none", n)
	}
	closeNATS()

	// A node restarted without retention rebuilds its index from the log.
	o.retention = 0
	base, _ = startServe(t, o)
	status, got = call(t, "GET", base+"/v1/runs/"+run, "alice-token", "")
	if status != 200 || got["status"] != "purged" || got["ended_as"] != "completed" {
		t.Fatalf("after a restart: %d %v; want the run purged", status, got)
	}
}
