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

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
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

// TestMetricsToolLabelsComeFromTheCatalog (issue 49): a tool call is
// counted under its name only when the run was offered that tool; any
// other name the model makes up counts as "unknown". Before, the name was
// the label: a tool named after a secret published it on /metrics, and a
// model inventing names grew the series without bound.
func TestMetricsToolLabelsComeFromTheCatalog(t *testing.T) {
	m := newMetrics()
	run := events.Run{RunID: "r1", Agent: "researcher"}
	for i, tool := range []string{"run_js", "spawn_fact_checker", "sk-proj-4f9c2a7e1b8d6053", "made_up_1", "made_up_2", "run_js"} {
		m.event(run, runtime.SinkEvent{Kind: runtime.SinkToolCall, CallID: strconv.Itoa(i), Tool: tool, Offered: !strings.HasPrefix(tool, "sk-") && !strings.HasPrefix(tool, "made_up")})
	}
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	var tools []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "cairn_tool_calls_total{") {
			tools = append(tools, line)
		}
	}
	want := []string{`cairn_tool_calls_total{tool="run_js"} 2`, `cairn_tool_calls_total{tool="spawn_fact_checker"} 1`, `cairn_tool_calls_total{tool="unknown"} 3`}
	if strings.Join(tools, "\n") != strings.Join(want, "\n") {
		t.Fatalf("tool series:\n%s\nwant:\n%s", strings.Join(tools, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out, "cairn_js_executions_total 2") {
		t.Errorf("run_js executions miscounted:\n%s", out)
	}
}

// TestMetricsToken: with --metrics-token, /metrics answers only a request
// that shows it (401 otherwise, naming the scheme); without, anyone.
func TestMetricsToken(t *testing.T) {
	for _, c := range []struct {
		name, token, auth string
		want              int
	}{
		{"no token configured", "", "", http.StatusOK},
		{"no credentials", "s3cr3t-metrics", "", http.StatusUnauthorized},
		{"another token", "s3cr3t-metrics", "Bearer s3cr3t-metricz", http.StatusUnauthorized},
		{"not bearer", "s3cr3t-metrics", "Basic s3cr3t-metrics", http.StatusUnauthorized},
		{"the token", "s3cr3t-metrics", "Bearer s3cr3t-metrics", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMetrics()
			m.token = c.token
			req := httptest.NewRequest("GET", "/metrics", nil)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			rec := httptest.NewRecorder()
			m.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.want, rec.Body.String())
			}
			if c.want == http.StatusUnauthorized && (rec.Header().Get("WWW-Authenticate") != "Bearer" || strings.Contains(rec.Body.String(), "cairn_")) {
				t.Fatalf("refusal: %v %s", rec.Header(), rec.Body.String())
			}
		})
	}
}
