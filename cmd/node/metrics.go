package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
)

// metrics is the node's Prometheus exposition, written by hand in the text
// format (version 0.0.4) so the node carries no metrics client dependency.
type metrics struct {
	mu            sync.Mutex
	toolCalls     map[string]int64
	parks         int64
	parked        map[string]bool
	completions   int64
	modelRequests map[string]int64
	tokens        map[[2]string]int64
	commits       histogram
	commitErrors  int64
	index         *runindex.Index
}

var commitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

type histogram struct {
	counts []int64
	sum    float64
	n      int64
}

func newMetrics() *metrics {
	return &metrics{toolCalls: map[string]int64{}, modelRequests: map[string]int64{}, tokens: map[[2]string]int64{}, parked: map[string]bool{},
		commits: histogram{counts: make([]int64, len(commitBuckets))}}
}

func (m *metrics) commit(d time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.commitErrors++
		return
	}
	s := d.Seconds()
	for i, b := range commitBuckets {
		if s <= b {
			m.commits.counts[i]++
		}
	}
	m.commits.sum += s
	m.commits.n++
}

func (m *metrics) event(r events.Run, ev runtime.SinkEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// A run is parked from its waiting event until its next event.
	delete(m.parked, r.RunID)
	switch ev.Kind {
	case runtime.SinkToolCall:
		m.toolCalls[ev.Tool]++
	case runtime.SinkWaiting:
		m.parks++
		m.parked[r.RunID] = true
	case runtime.SinkCompleted:
		m.completions++
	}
}

type countingModel struct {
	m     *metrics
	agent string
	inner model.Model
}

func (m *metrics) model(agent string, inner model.Model) model.Model {
	return countingModel{m: m, agent: agent, inner: inner}
}

func (c countingModel) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	resp, err := c.inner.Generate(ctx, req)
	c.m.mu.Lock()
	c.m.modelRequests[c.agent]++
	if resp != nil {
		c.m.tokens[[2]string{c.agent, "input"}] += resp.Usage.InputTokens
		c.m.tokens[[2]string{c.agent, "output"}] += resp.Usage.OutputTokens
	}
	c.m.mu.Unlock()
	return resp, err
}

func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.index != nil {
		fmt.Fprintln(w, "# HELP cairn_runs Runs by status, from the run index.\n# TYPE cairn_runs gauge")
		counts := m.index.Counts()
		for _, st := range []runtime.CallStatus{runtime.StatusRunning, runtime.StatusCompleted, runtime.StatusFailed, runtime.StatusCancelled} {
			fmt.Fprintf(w, "cairn_runs{status=%q} %d\n", st, counts[st])
		}
	}
	fmt.Fprintln(w, "# HELP cairn_tool_calls_total Tool calls committed, by tool.\n# TYPE cairn_tool_calls_total counter")
	for _, k := range sortedKeys(m.toolCalls) {
		fmt.Fprintf(w, "cairn_tool_calls_total{tool=%q} %d\n", k, m.toolCalls[k])
	}
	fmt.Fprintf(w, "# HELP cairn_js_executions_total run_js scripts dispatched.\n# TYPE cairn_js_executions_total counter\ncairn_js_executions_total %d\n", m.toolCalls[jstool.Name])
	fmt.Fprintf(w, "# HELP cairn_parks_total Times a run parked waiting for children.\n# TYPE cairn_parks_total counter\ncairn_parks_total %d\n", m.parks)
	fmt.Fprintf(w, "# HELP cairn_parked_runs Runs parked on this node, waiting for children.\n# TYPE cairn_parked_runs gauge\ncairn_parked_runs %d\n", len(m.parked))
	fmt.Fprintf(w, "# HELP cairn_completions_total Runs completed on this node.\n# TYPE cairn_completions_total counter\ncairn_completions_total %d\n", m.completions)
	fmt.Fprintln(w, "# HELP cairn_model_requests_total Model requests, by agent.\n# TYPE cairn_model_requests_total counter")
	for _, k := range sortedKeys(m.modelRequests) {
		fmt.Fprintf(w, "cairn_model_requests_total{agent=%q} %d\n", k, m.modelRequests[k])
	}
	fmt.Fprintln(w, "# HELP cairn_model_tokens_total Reported model tokens, by agent and kind.\n# TYPE cairn_model_tokens_total counter")
	keys := make([][2]string, 0, len(m.tokens))
	for k := range m.tokens {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	for _, k := range keys {
		fmt.Fprintf(w, "cairn_model_tokens_total{agent=%q,kind=%q} %d\n", k[0], k[1], m.tokens[k])
	}
	fmt.Fprintln(w, "# HELP cairn_commit_seconds Checkpoint commit latency (fenced publish to acknowledgement).\n# TYPE cairn_commit_seconds histogram")
	for i, b := range commitBuckets {
		fmt.Fprintf(w, "cairn_commit_seconds_bucket{le=\"%g\"} %d\n", b, m.commits.counts[i])
	}
	fmt.Fprintf(w, "cairn_commit_seconds_bucket{le=\"+Inf\"} %d\ncairn_commit_seconds_sum %g\ncairn_commit_seconds_count %d\n", m.commits.n, m.commits.sum, m.commits.n)
	fmt.Fprintf(w, "# HELP cairn_commit_errors_total Commits that failed.\n# TYPE cairn_commit_errors_total counter\ncairn_commit_errors_total %d\n", m.commitErrors)
}

func sortedKeys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
