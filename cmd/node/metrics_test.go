package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// answers is a model that answers with each of its errors in turn (nil: a
// response).
type answers struct{ errs []error }

func (a *answers) Generate(ctx context.Context, _ model.Request) (*model.Response, error) {
	err := a.errs[0]
	if err != nil {
		// The retry loop's failed attempts before the last, then the last.
		model.ReportFailure(ctx, model.Failure{Provider: "openai", Model: "gpt-x", Attempt: 1, Class: model.FailureStatus, Status: 503, Retry: true})
		model.ReportFailure(ctx, model.Failure{Provider: "openai", Model: "gpt-x", Attempt: 2, Class: model.FailureConnection})
	}
	a.errs = a.errs[1:]
	if err != nil {
		return nil, err
	}
	return &model.Response{Usage: model.Usage{InputTokens: 10, OutputTokens: 2}}, nil
}

// /metrics has the model requests' latency and their errors by kind, and
// the standard Go and process metrics under Prometheus' own names.
func TestMetricsModelAndProcess(t *testing.T) {
	m := newMetrics()
	mdl := m.model("researcher", &answers{errs: []error{nil, errors.New("connection reset"), model.Permanent(errors.New("401"))}})
	for range 3 {
		_, _ = mdl.Generate(context.Background(), model.Request{})
	}
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`cairn_model_requests_total{agent="researcher"} 3`,
		`cairn_model_request_seconds_count{agent="researcher"} 3`,
		`cairn_model_request_seconds_bucket{agent="researcher",le="+Inf"} 3`,
		`cairn_model_errors_total{agent="researcher",kind="permanent"} 1`,
		`cairn_model_errors_total{agent="researcher",kind="transient"} 1`,
		`cairn_model_request_failures_total{agent="researcher",provider="openai",model="gpt-x",status="503"} 2`,
		`cairn_model_request_failures_total{agent="researcher",provider="openai",model="gpt-x",status="connection"} 2`,
		"# TYPE go_goroutines gauge\ngo_goroutines ",
		"# TYPE go_memstats_heap_alloc_bytes gauge",
		"# TYPE process_start_time_seconds gauge",
		"# TYPE process_cpu_seconds_total counter",
		"# TYPE process_resident_memory_bytes gauge",
		"# TYPE process_open_fds gauge",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}

// /metrics counts the attempts a node ran, by agent, why each started and
// how it ended, with their durations: the researcher ends completed in
// exactly one attempt (it may park for its children first: how often
// depends on when they finish), each child completes in the one attempt it
// was started with.
func TestMetricsAttempts(t *testing.T) {
	base := serving(t, t.TempDir())
	status, _, started := post(t, base, nil, `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if status != 201 {
		t.Fatalf("POST: %d %v", status, started)
	}
	run, _ := started["run_id"].(string)
	sse(t, base, "alice-token", run) // to its end
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	out := string(b)
	// outcomes[agent][outcome] sums cairn_attempts_total over reasons.
	outcomes := map[string]map[string]int{}
	re := regexp.MustCompile(`^cairn_attempts_total\{agent="([^"]+)",reason="([^"]+)",outcome="([^"]+)"\} (\d+)$`)
	for _, l := range strings.Split(out, "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			if outcomes[m[1]] == nil {
				outcomes[m[1]] = map[string]int{}
			}
			n, _ := strconv.Atoi(m[4])
			outcomes[m[1]][m[3]] += n
			if m[3] == "completed" && m[1] != "researcher" && m[2] != "started" {
				t.Errorf("a child completed in an attempt started for %q", m[2])
			}
		}
	}
	if outcomes["researcher"]["completed"] != 1 || outcomes["fact-checker"]["completed"] != 1 || outcomes["summarizer"]["completed"] != 1 {
		t.Errorf("completed attempts %v, want one per run:\n%s", outcomes, grepLines(out, "cairn_attempts_total"))
	}
	for _, want := range []string{
		`cairn_attempt_seconds_count{agent="researcher",outcome="completed"} 1`,
		`cairn_attempt_seconds_bucket{agent="fact-checker",outcome="completed",le="+Inf"} 1`,
		`cairn_attempts_total{agent="fact-checker",reason="started",outcome="completed"} 1`,
		// Each run once, from its creation to its end.
		`cairn_run_seconds_count{agent="researcher",outcome="completed"} 1`,
		`cairn_run_seconds_count{agent="fact-checker",outcome="completed"} 1`,
		`cairn_run_seconds_bucket{agent="summarizer",outcome="completed",le="+Inf"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, grepLines(out, "cairn_attempt")+"\n"+grepLines(out, "cairn_run_seconds"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
