package jstool_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/schema"
)

type backend struct {
	calls []jstool.Invocation
	value string
	err   error
}

func (b *backend) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	b.calls = append(b.calls, inv)
	return jstool.Value{JSON: json.RawMessage(b.value)}, b.err
}

type replacer struct{ secret, with string }

func (r replacer) Redact(s string) string { return strings.ReplaceAll(s, r.secret, r.with) }

type panicky struct{}

func (panicky) Invoke(context.Context, jstool.Invocation) (jstool.Value, error) { panic("backend bug") }

func invoker(t *testing.T, b jstool.Backend, red jstool.Redactor) *jstool.Invoker {
	t.Helper()
	s, err := schema.Compile([]byte(`{"type":"object","required":["key"],"properties":{"key":{"type":"string"}},"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	caps := []jstool.Capability{{Info: jstool.CapabilityInfo{Name: "kv.get", InputSchema: s.Raw()}, Schema: s}}
	return jstool.NewInvoker(caps, b, red, nil)
}

// C41: the canonical invoker validates arguments before the backend,
// redacts results before JavaScript, and records attribution.
func TestC41_CanonicalInvoker(t *testing.T) {
	t.Run("invalid arguments never reach the backend", func(t *testing.T) {
		b := &backend{value: `{}`}
		_, err := invoker(t, b, replacer{}).Invoke(context.Background(), "c1", 1, "kv.get", json.RawMessage(`{"key":1}`))
		if !errors.Is(err, schema.ErrInvalid) || len(b.calls) != 0 {
			t.Fatalf("err = %v, backend calls %d", err, len(b.calls))
		}
	})
	t.Run("unknown capability", func(t *testing.T) {
		b := &backend{value: `{}`}
		_, err := invoker(t, b, replacer{}).Invoke(context.Background(), "c1", 1, "kv.put", json.RawMessage(`{}`))
		if !errors.Is(err, jstool.ErrUnknownCapability) || len(b.calls) != 0 {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("result redacted before JavaScript", func(t *testing.T) {
		b := &backend{value: `{"token":"tok-123"}`}
		v, err := invoker(t, b, replacer{"tok-123", "[REDACTED]"}).Invoke(context.Background(), "c1", 1, "kv.get", json.RawMessage(`{"key":"a"}`))
		if err != nil || string(v.JSON) != `{"token":"[REDACTED]"}` {
			t.Fatalf("= %s, %v", v.JSON, err)
		}
	})
	t.Run("a redaction that breaks JSON still hides the secret", func(t *testing.T) {
		b := &backend{value: `{"token":"tok-123"}`}
		v, err := invoker(t, b, replacer{`"tok-123"`, `[REDACTED`}).Invoke(context.Background(), "c1", 1, "kv.get", json.RawMessage(`{"key":"a"}`))
		if err != nil || strings.Contains(string(v.JSON), "tok-123") || !json.Valid(v.JSON) {
			t.Fatalf("= %s, %v", v.JSON, err)
		}
	})
	t.Run("errors reaching JavaScript are redacted", func(t *testing.T) {
		b := &backend{value: `1`, err: errors.New("auth failed for tok-123")}
		_, err := invoker(t, b, replacer{"tok-123", "[REDACTED]"}).Invoke(context.Background(), "c1", 1, "kv.get", json.RawMessage(`{"key":"a"}`))
		if err == nil || strings.Contains(err.Error(), "tok-123") || !errors.Is(err, jstool.ErrBackend) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a panicking backend is an error with attribution", func(t *testing.T) {
		iv := invoker(t, panicky{}, replacer{})
		_, err := iv.Invoke(context.Background(), "c1", 1, "kv.get", json.RawMessage(`{"key":"a"}`))
		if !errors.Is(err, jstool.ErrBackend) || len(iv.Take("c1")) != 1 {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("attribution", func(t *testing.T) {
		b := &backend{value: `1`}
		iv := invoker(t, b, replacer{})
		_, _ = iv.Invoke(context.Background(), "c1", 1, "kv.get", json.RawMessage(`{"key":"a"}`))
		_, _ = iv.Invoke(context.Background(), "c1", 2, "kv.get", json.RawMessage(`{"key":5}`))
		b.err = errors.New("backend down")
		_, _ = iv.Invoke(context.Background(), "c1", 3, "kv.get", json.RawMessage(`{"key":"b"}`))
		recs := iv.Take("c1")
		if len(recs) != 3 || recs[0].Outcome != "ok" || recs[1].Outcome != "rejected" || recs[2].Outcome != "error" || recs[0].ArgsDigest == "" || recs[0].ScriptCallID != "c1" {
			t.Fatalf("records = %+v", recs)
		}
		if len(iv.Take("c1")) != 0 {
			t.Fatal("Take must forget what it returned")
		}
		if len(b.calls) != 2 || b.calls[1].Seq != 3 {
			t.Fatalf("backend calls = %+v", b.calls)
		}
	})
}

// C22: a failed script lists the callbacks that completed and warns
// against repeating the whole script.
func TestC22_FailureListsCompletedCallbacks(t *testing.T) {
	cbs := []jstool.Callback{
		{Seq: 1, Capability: "kv.put", ArgsDigest: "aa", Outcome: "ok"},
		{Seq: 2, Capability: "kv.get", ArgsDigest: "bb", Outcome: "error", Error: "down"},
	}
	r := jstool.Format(jstool.Outcome{Failure: &jstool.Failure{Kind: "exception", Message: "TypeError: x"}, Logs: []jstool.LogLine{{Level: "warn", Text: "half done"}}}, cbs)
	for _, want := range []string{"TypeError: x", "#1 caps.kv.put", "COMPLETED", "Do not rerun the whole script", "#2 caps.kv.get error: down", "[warn] half done"} {
		if !r.IsError || !strings.Contains(r.Content, want) {
			t.Fatalf("failure text lacks %q:\n%s", want, r.Content)
		}
	}
	none := jstool.Format(jstool.Outcome{Failure: &jstool.Failure{Kind: "timeout", Message: "2s"}}, nil)
	if !strings.Contains(none.Content, "No capability call completed") {
		t.Fatal(none.Content)
	}
}

func TestFormatSuccess(t *testing.T) {
	r := jstool.Format(jstool.Outcome{Value: json.RawMessage(`{"n":12345678901234567890}`), Logs: []jstool.LogLine{{Level: "log", Text: "hi"}}}, nil)
	if r.IsError || r.Content != `{"result":{"n":12345678901234567890},"logs":[{"level":"log","text":"hi"}]}` {
		t.Fatalf("= %+v", r)
	}
	if r := jstool.Format(jstool.Outcome{}, nil); r.Content != `{"result":null}` {
		t.Fatalf("empty value = %s", r.Content)
	}
}

func TestDefinitionListsCapabilitiesSorted(t *testing.T) {
	d := jstool.Definition([]jstool.CapabilityInfo{{Name: "z.b", InputSchema: json.RawMessage(`{ "type" : "object" }`)}, {Name: "a", InputSchema: json.RawMessage(`{}`)}})
	if d.Name != "run_js" || strings.Index(d.Description, "caps.a(") > strings.Index(d.Description, "caps.z.b(") || !strings.Contains(d.Description, `{"type":"object"}`) {
		t.Fatalf("definition = %+v", d)
	}
	if !json.Valid(d.InputSchema) {
		t.Fatal("input schema is not JSON")
	}
}
