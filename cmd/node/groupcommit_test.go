package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// A bad --group-commit (flag or CAIRN_GROUP_COMMIT) is refused before
// anything starts, naming where it came from.
func TestGroupCommitFlagRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{args: []string{"--group-commit", "fast", example, "task"}, want: `-group-commit: "fast": want adaptive, single or batch`},
		{env: "bogus", args: []string{example, "task"}, want: `CAIRN_GROUP_COMMIT: "bogus": want adaptive, single or batch`},
	} {
		t.Setenv("CAIRN_GROUP_COMMIT", tc.env)
		var out, errb bytes.Buffer
		if code := runCmd(append([]string{"--data", t.TempDir()}, tc.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v (env %q): exit %d, stderr %q; want 2 and %q", tc.args, tc.env, code, errb.String(), tc.want)
		}
	}
}

// The mode reaches the store: a node run with --group-commit single leaves
// the stream without atomic publish (works on any JetStream server); the
// default (adaptive) turns it on.
func TestGroupCommitFlagReachesTheStore(t *testing.T) {
	dir := t.TempDir()
	allowAtomic := func() bool {
		t.Helper()
		srv := natstest.ServerAt(t, filepath.Join(dir, "jetstream"))
		defer srv.Close(context.Background())
		nc := natstest.Connect(t, srv)
		defer nc.Close()
		js, _ := njs.New(nc)
		st, err := js.Stream(context.Background(), "CAIRN")
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.AllowAtomicPublish
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{{[]string{"--group-commit", string(jetstream.CommitSingle)}, false}, {nil, true}} {
		var out, errb bytes.Buffer
		args := append(append([]string{"--data", dir, "--json"}, tc.args...), example, "Is the Great Wall visible from orbit?")
		if code := runCmd(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d\n%s", tc.args, code, errb.String())
		}
		if got := allowAtomic(); got != tc.want {
			t.Fatalf("%v: stream allow_atomic %v, want %v", tc.args, got, tc.want)
		}
	}
}

// Batch sizes are exposed per stream (the log and the KV buckets batch
// separately), and a failed batch counts as a fallback.
func TestBatchMetricsByStream(t *testing.T) {
	m := newMetrics()
	m.batch(jetstream.BatchEvent{Stream: "CAIRN", Size: 200})
	m.batch(jetstream.BatchEvent{Stream: "CAIRN", Size: 3})
	m.batch(jetstream.BatchEvent{Stream: "KV_cairn_budgets", Size: 40, Err: context.DeadlineExceeded})
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`cairn_commit_batch_size_count{stream="CAIRN"} 2`,
		`cairn_commit_batch_size_sum{stream="CAIRN"} 203`,
		`cairn_commit_batch_size_bucket{stream="KV_cairn_budgets",le="64"} 1`,
		`cairn_commit_batch_fallbacks_total 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s:\n%s", want, out)
		}
	}
}
