package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// answers is a model that answers with each of its errors in turn (nil: a
// response).
type answers struct{ errs []error }

func (a *answers) Generate(context.Context, model.Request) (*model.Response, error) {
	err := a.errs[0]
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
