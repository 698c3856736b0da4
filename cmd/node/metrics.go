package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/retention"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
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
	modelSeconds  map[string]*histogram // by agent
	modelErrors   map[[2]string]int64   // by agent and kind: permanent or transient
	// modelFailures counts failed provider requests (every attempt of a
	// step's retry loop), by agent, provider, model and status.
	modelFailures map[[4]string]int64
	tokens        map[[2]string]int64
	commits       map[string]*histogram // by how the commit was published
	commitErrors  int64
	batchSizes    map[string]*histogram // by stream
	batchFallback int64
	attempts      map[[3]string]int64      // by agent, reason and outcome
	attemptSecs   map[[2]string]*histogram // by agent and outcome
	runSecs       map[[2]string]*histogram // by agent and outcome
	// purged counts the sessions, events and bytes this node's retention
	// sweeps purged; purgeFailures the sessions whose purge failed (tried
	// again next sweep).
	purged        [3]int64
	purgeFailures int64
	index         *runindex.Index
	// token, when set, is what a scrape must show as its bearer token
	// (--metrics-token); empty: /metrics answers anyone.
	token string
}

var (
	commitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	batchBuckets  = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000}
	modelBuckets  = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300}
	// attemptBuckets: an attempt runs from milliseconds (a wake that
	// parks again) to the root's whole wall-clock budget.
	attemptBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}
)

type histogram struct {
	counts []int64
	sum    float64
	n      int64
}

func newMetrics() *metrics {
	return &metrics{toolCalls: map[string]int64{}, modelRequests: map[string]int64{}, modelSeconds: map[string]*histogram{}, modelErrors: map[[2]string]int64{},
		modelFailures: map[[4]string]int64{},
		tokens:        map[[2]string]int64{}, parked: map[string]bool{},
		commits: map[string]*histogram{}, batchSizes: map[string]*histogram{},
		attempts: map[[3]string]int64{}, attemptSecs: map[[2]string]*histogram{}, runSecs: map[[2]string]*histogram{}}
}

// observeIn observes v in hs[k]'s histogram, made on first use.
func observeIn[K comparable](hs map[K]*histogram, k K, buckets []float64, v float64) {
	h := hs[k]
	if h == nil {
		h = &histogram{counts: make([]int64, len(buckets))}
		hs[k] = h
	}
	h.observe(buckets, v)
}

func (h *histogram) observe(buckets []float64, v float64) {
	for i, b := range buckets {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.n++
}

func (h *histogram) write(w io.Writer, name, labels string, buckets []float64) {
	for i, b := range buckets {
		fmt.Fprintf(w, "%s_bucket{%sle=\"%g\"} %d\n", name, labels, b, h.counts[i])
	}
	fmt.Fprintf(w, "%s_bucket{%sle=\"+Inf\"} %d\n", name, labels, h.n)
	if labels != "" {
		labels = "{" + strings.TrimSuffix(labels, ",") + "}"
	}
	fmt.Fprintf(w, "%s_sum%s %g\n%s_count%s %d\n", name, labels, h.sum, name, labels, h.n)
}

func (m *metrics) commit(ev cjs.CommitEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.Err != nil {
		m.commitErrors++
		return
	}
	observeIn(m.commits, ev.Mode, commitBuckets, ev.Duration.Seconds())
}

func (m *metrics) batch(ev cjs.BatchEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	observeIn(m.batchSizes, ev.Stream, batchBuckets, float64(ev.Size))
	if ev.Err != nil {
		m.batchFallback++
	}
}

func (m *metrics) event(r events.Run, ev runtime.SinkEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// A run is parked from its waiting event until its next event.
	delete(m.parked, r.RunID)
	switch ev.Kind {
	case runtime.SinkToolCall:
		m.toolCalls[toolLabel(ev)]++
	case runtime.SinkWaiting:
		m.parks++
		m.parked[r.RunID] = true
	case runtime.SinkCompleted:
		m.completions++
	}
}

// unknownTool is the label of a call of a tool the run was not offered.
const unknownTool = "unknown"

// toolLabel is a tool call's label: its tool's name when the run was
// offered that tool (its catalog: run_js, complete, spawn_<slug>, the
// child controls), unknownTool otherwise. No label value is the model's
// choice: a made-up name could be a secret, and made-up names would grow
// the series without bound.
func toolLabel(ev runtime.SinkEvent) string {
	if !ev.Offered {
		return unknownTool
	}
	return ev.Tool
}

func (m *metrics) attempt(ev actors.AttemptEnded) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attempts[[3]string{ev.Run.Agent, ev.Reason, ev.Outcome}]++
	k := [2]string{ev.Run.Agent, ev.Outcome}
	observeIn(m.attemptSecs, k, attemptBuckets, ev.Took.Seconds())
}

// swept is the retention sweeper's OnSweep.
func (m *metrics) swept(rep retention.Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purged[0] += int64(rep.Purged)
	m.purged[1] += int64(rep.Events)
	m.purged[2] += rep.Bytes
	m.purgeFailures += int64(rep.Failed)
}

// runEnded is the run index's OnEnd for cairn_run_seconds: each run that
// ended since this node started (the index's rebuild replays every end the
// log holds) and whose last lease was this node's (so that a cluster counts
// each run once, on the node that ran it last), observed from its creation
// to its end by the log's own times. A run that ended before any attempt
// (cancelled at once) had no lease and is not counted.
func (m *metrics) runEnded(ranHere func(holder string) bool, since time.Time) func(projections.RunEntry) {
	return func(e projections.RunEntry) {
		if e.Updated.Before(since) || e.Node == "" || !ranHere(e.Node) || e.Created.IsZero() {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		k := [2]string{e.Agent, string(e.Status)}
		observeIn(m.runSecs, k, attemptBuckets, max(e.Updated.Sub(e.Created), 0).Seconds())
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
	start := time.Now()
	ctx = model.WithTrace(ctx, &model.Trace{AttemptFailed: func(f model.Failure) {
		status := f.Class
		if f.Class == model.FailureStatus {
			status = strconv.Itoa(f.Status)
		}
		c.m.mu.Lock()
		c.m.modelFailures[[4]string{c.agent, f.Provider, f.Model, status}]++
		c.m.mu.Unlock()
	}})
	resp, err := c.inner.Generate(ctx, req)
	took := time.Since(start).Seconds()
	c.m.mu.Lock()
	c.m.modelRequests[c.agent]++
	observeIn(c.m.modelSeconds, c.agent, modelBuckets, took)
	if err != nil {
		kind := "transient"
		if model.IsPermanent(err) {
			kind = "permanent"
		}
		c.m.modelErrors[[2]string{c.agent, kind}]++
	}
	if resp != nil {
		c.m.tokens[[2]string{c.agent, "input"}] += resp.Usage.InputTokens
		c.m.tokens[[2]string{c.agent, "output"}] += resp.Usage.OutputTokens
	}
	c.m.mu.Unlock()
	return resp, err
}

func (m *metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.token != "" && !showsBearer(r, m.token) {
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "/metrics needs the metrics token (--metrics-token) as a bearer token", http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	if m.index != nil {
		// What the log held when asked: the runs' counts and the ends it
		// told (runEnded, which takes m.mu: before it is taken). A log
		// out of reach is not waited for long; the scrape says what the
		// index has.
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		_ = m.index.CatchUp(ctx)
		cancel()
	}
	// Rendered under the lock, written after it: a slow scraper holds
	// neither the counters nor the index's consumer (whose OnEnd takes
	// the lock).
	var buf bytes.Buffer
	m.mu.Lock()
	m.render(&buf)
	m.mu.Unlock()
	_, _ = w.Write(buf.Bytes())
}

// showsBearer reports whether r's Authorization is "Bearer <token>", compared
// in constant time.
func showsBearer(r *http.Request, token string) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// metricsTokenFlag registers --metrics-token on fs (CAIRN_METRICS_TOKEN
// through parseFlags).
func metricsTokenFlag(fs *flag.FlagSet, token *string) {
	fs.StringVar(token, "metrics-token", "", "bearer token /metrics requires (default: none, /metrics answers anyone; see docs/operations.md, Security)")
}

// render writes the metrics; m.mu is held.
func (m *metrics) render(w io.Writer) {
	if m.index != nil {
		fmt.Fprintln(w, "# HELP cairn_runs Runs by status, from the run index.\n# TYPE cairn_runs gauge")
		counts := m.index.Counts()
		for _, st := range projections.RunStatuses {
			fmt.Fprintf(w, "cairn_runs{status=%q} %d\n", st, counts[st])
		}
	}
	fmt.Fprintf(w, "# HELP cairn_sessions_purged_total Sessions this node purged when their retention ran out.\n# TYPE cairn_sessions_purged_total counter\ncairn_sessions_purged_total %d\n", m.purged[0])
	fmt.Fprintf(w, "# HELP cairn_purged_events_total Events of the sessions this node purged.\n# TYPE cairn_purged_events_total counter\ncairn_purged_events_total %d\n", m.purged[1])
	fmt.Fprintf(w, "# HELP cairn_purged_bytes_total Bytes of log of the sessions this node purged.\n# TYPE cairn_purged_bytes_total counter\ncairn_purged_bytes_total %d\n", m.purged[2])
	fmt.Fprintf(w, "# HELP cairn_purge_failures_total Purges that failed (each is tried again next sweep).\n# TYPE cairn_purge_failures_total counter\ncairn_purge_failures_total %d\n", m.purgeFailures)
	fmt.Fprintln(w, "# HELP cairn_tool_calls_total Tool calls committed, by tool: one the run was offered, or unknown.\n# TYPE cairn_tool_calls_total counter")
	for _, k := range sortedKeys(m.toolCalls) {
		fmt.Fprintf(w, "cairn_tool_calls_total{tool=%q} %d\n", k, m.toolCalls[k])
	}
	fmt.Fprintf(w, "# HELP cairn_js_executions_total run_js scripts dispatched.\n# TYPE cairn_js_executions_total counter\ncairn_js_executions_total %d\n", m.toolCalls[jstool.Name])
	fmt.Fprintf(w, "# HELP cairn_parks_total Times a run parked waiting for children.\n# TYPE cairn_parks_total counter\ncairn_parks_total %d\n", m.parks)
	fmt.Fprintf(w, "# HELP cairn_parked_runs Runs parked on this node, waiting for children.\n# TYPE cairn_parked_runs gauge\ncairn_parked_runs %d\n", len(m.parked))
	fmt.Fprintf(w, "# HELP cairn_completions_total Runs completed on this node.\n# TYPE cairn_completions_total counter\ncairn_completions_total %d\n", m.completions)
	fmt.Fprintln(w, "# HELP cairn_attempts_total Attempts this node ran to their end, by agent, why each started (started, woken, recovered, retried ...) and how it ended (completed, needs_input, parked, drained, fenced, cancelled, failed, error).\n# TYPE cairn_attempts_total counter")
	akeys := make([][3]string, 0, len(m.attempts))
	for k := range m.attempts {
		akeys = append(akeys, k)
	}
	sort.Slice(akeys, func(i, j int) bool {
		return strings.Join(akeys[i][:], "\x00") < strings.Join(akeys[j][:], "\x00")
	})
	for _, k := range akeys {
		fmt.Fprintf(w, "cairn_attempts_total{agent=%q,reason=%q,outcome=%q} %d\n", k[0], k[1], k[2], m.attempts[k])
	}
	fmt.Fprintln(w, "# HELP cairn_attempt_seconds Attempt duration, by agent and outcome: a run's time on this node, between its parks.\n# TYPE cairn_attempt_seconds histogram")
	for _, k := range sortedPairs(m.attemptSecs) {
		m.attemptSecs[k].write(w, "cairn_attempt_seconds", fmt.Sprintf("agent=%q,outcome=%q,", k[0], k[1]), attemptBuckets)
	}
	fmt.Fprintln(w, "# HELP cairn_run_seconds Run duration from its creation to its end, by agent and outcome (completed, needs_input, failed, cancelled): the runs that ended since this node started, counted by the node that ran each last.\n# TYPE cairn_run_seconds histogram")
	for _, k := range sortedPairs(m.runSecs) {
		m.runSecs[k].write(w, "cairn_run_seconds", fmt.Sprintf("agent=%q,outcome=%q,", k[0], k[1]), attemptBuckets)
	}
	fmt.Fprintln(w, "# HELP cairn_model_requests_total Model requests, by agent.\n# TYPE cairn_model_requests_total counter")
	for _, k := range sortedKeys(m.modelRequests) {
		fmt.Fprintf(w, "cairn_model_requests_total{agent=%q} %d\n", k, m.modelRequests[k])
	}
	fmt.Fprintln(w, "# HELP cairn_model_request_seconds Model request latency (the provider's answer, its retries included), by agent.\n# TYPE cairn_model_request_seconds histogram")
	for _, k := range sortedKeys(m.modelSeconds) {
		m.modelSeconds[k].write(w, "cairn_model_request_seconds", fmt.Sprintf("agent=%q,", k), modelBuckets)
	}
	fmt.Fprintln(w, "# HELP cairn_model_errors_total Model requests that failed, by agent and kind: permanent (the provider refused the request: 4xx, a malformed answer; not retried) or transient.\n# TYPE cairn_model_errors_total counter")
	for _, k := range sortedPairs(m.modelErrors) {
		fmt.Fprintf(w, "cairn_model_errors_total{agent=%q,kind=%q} %d\n", k[0], k[1], m.modelErrors[k])
	}
	fmt.Fprintln(w, "# HELP cairn_model_request_failures_total Failed requests to a model provider, each attempt of a step's retries counted, by agent, provider, model and status: the HTTP status, or connection, timeout or malformed.\n# TYPE cairn_model_request_failures_total counter")
	failures := make([][4]string, 0, len(m.modelFailures))
	for k := range m.modelFailures {
		failures = append(failures, k)
	}
	slices.SortFunc(failures, func(a, b [4]string) int { return slices.Compare(a[:], b[:]) })
	for _, k := range failures {
		fmt.Fprintf(w, "cairn_model_request_failures_total{agent=%q,provider=%q,model=%q,status=%q} %d\n", k[0], k[1], k[2], k[3], m.modelFailures[k])
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
	fmt.Fprintln(w, "# HELP cairn_commit_seconds Checkpoint commit latency (fenced publish to acknowledgement), by how it was published: single, batch (group commit), fallback (its batch failed; published alone).\n# TYPE cairn_commit_seconds histogram")
	for _, mode := range []string{"single", "batch", "fallback"} {
		if h := m.commits[mode]; h != nil {
			h.write(w, "cairn_commit_seconds", fmt.Sprintf("mode=%q,", mode), commitBuckets)
		}
	}
	fmt.Fprintf(w, "# HELP cairn_commit_errors_total Commits that failed.\n# TYPE cairn_commit_errors_total counter\ncairn_commit_errors_total %d\n", m.commitErrors)
	fmt.Fprintln(w, "# HELP cairn_commit_batch_size Writes per atomic batch (group commit), by stream: the run log and the node's KV buckets.\n# TYPE cairn_commit_batch_size histogram")
	for _, stream := range sortedKeys(m.batchSizes) {
		m.batchSizes[stream].write(w, "cairn_commit_batch_size", fmt.Sprintf("stream=%q,", stream), batchBuckets)
	}
	fmt.Fprintf(w, "# HELP cairn_commit_batch_fallbacks_total Batches refused or unacknowledged whose commits were published one by one.\n# TYPE cairn_commit_batch_fallbacks_total counter\ncairn_commit_batch_fallbacks_total %d\n", m.batchFallback)
	writeProcessMetrics(w)
}

// sortedPairs is the keys of m in order.
func sortedPairs[V any](m map[[2]string]V) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	return keys
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
