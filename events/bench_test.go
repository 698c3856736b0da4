package events_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/events/wire"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// benchCheckpoint is a response commit as the loop makes one: an
// assistant message with reasoning, text and n tool calls (provider
// metadata on it), the calls journaled, the usage and a failed attempt.
func benchCheckpoint(n int) *runtime.Checkpoint {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	parts := []model.Part{
		{Type: model.PartReasoning, Text: strings.Repeat("thinking about it ", 20), Meta: map[string][]byte{"signature": []byte("c2lnbmF0dXJl")}},
		{Type: model.PartText, Text: "Let me look that up."},
	}
	cp := &runtime.Checkpoint{Version: runtime.CheckpointVersion, ContractHash: strings.Repeat("ab", 32), Revision: 7, RunKey: "k1",
		Phase: runtime.PhaseCalls, Step: 3, ResponseID: "k1-7-0",
		Usage:         &model.Usage{InputTokens: 1200, OutputTokens: 300, CachedInputTokens: 1000},
		ModelFailures: []model.Failure{{Provider: "openai", Model: "gpt-4.1-mini", Attempt: 1, Status: 503, Class: model.FailureStatus, Error: "503 Service Unavailable", Retry: true, RetryIn: time.Second, At: at}}}
	for i := range n {
		id := fmt.Sprintf("call_%024d", i)
		args := fmt.Sprintf(`{"code":"return await tools.search({q: \"item %d\"})"}`, i)
		parts = append(parts, model.Part{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: id, Name: "run_js", Args: args}})
		cp.Calls = append(cp.Calls, runtime.CallRecord{ID: id, Name: "run_js", Args: args, State: runtime.CallPending})
		cp.UsedCallIDs = append(cp.UsedCallIDs, id)
	}
	cp.Append = []model.Message{{ID: "k1-7-0", Role: model.RoleAssistant, Parts: parts, Meta: map[string][]byte{"response_id": []byte("resp_123")}}}
	return cp
}

// BenchmarkCheckpointEncode: a response commit of 3 calls encoded as the
// commit path does (store/jetstream RunStore.SaveCheckpoint: the
// checkpoint, its payload on bases, the envelope), and the payload's
// decode as a reader does (events.DecodeCheckpoint; version 1, as every
// commit that lists its calls whole is). The -via-wire variants convert
// to and from the wire types on the way, which neither path does
// (events/schema.go says why).
func BenchmarkCheckpointEncode(b *testing.B) {
	cp := benchCheckpoint(3)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	on := events.Bases{UsedSeq: 4, UsedRev: 2}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := json.Marshal(cp)
			if err != nil {
				b.Fatal(err)
			}
			ev := events.NewCommit("s1", "r1", cp.Revision, 1, at, data, on)
			if _, _, err := events.Encode(ev, "s1.r1.1.7"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same through the wire types: what converting every commit
	// would cost (the commit path encodes the runtime's struct, which
	// TestRuntimeEncodesAsWire holds to the wire's encoding).
	b.Run("encode-via-wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := events.ToWire(cp)
			data, err := json.Marshal(&w)
			if err != nil {
				b.Fatal(err)
			}
			ev := events.NewCommit("s1", "r1", cp.Revision, 1, at, data, on)
			if _, _, err := events.Encode(ev, "s1.r1.1.7"); err != nil {
				b.Fatal(err)
			}
		}
	})
	data, _ := json.Marshal(cp)
	ev := events.NewCommit("s1", "r1", cp.Revision, 1, at, data, on)
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(ev.Data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := events.DecodeCheckpoint(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-via-wire", func(b *testing.B) {
		b.SetBytes(int64(len(ev.Data)))
		b.ReportAllocs()
		for b.Loop() {
			var w wire.CommitV1
			if err := json.Unmarshal(ev.Data, &w); err != nil {
				b.Fatal(err)
			}
			// What a version 1 reader through the wire types would do:
			// upcast, then convert.
			calls := make([]wire.Call, len(w.Checkpoint.Calls))
			for i, c := range w.Checkpoint.Calls {
				calls[i] = wire.Call{ID: c.ID, Name: c.Name, Args: c.Args, State: c.State, ResultID: c.ResultID}
			}
			v := w.Checkpoint
			cp := wire.Checkpoint{Version: v.Version, ContractHash: v.ContractHash, Revision: v.Revision, RunKey: v.RunKey, Phase: v.Phase, Step: v.Step,
				ResponseID: v.ResponseID, Calls: calls, UsedCallIDs: v.UsedCallIDs, Reply: v.Reply, Append: v.Append, Usage: v.Usage, ModelFailures: v.ModelFailures}
			_ = events.FromWire(&cp)
		}
	})
}

// A commit's payload is allocated once, whatever bases it carries (the
// widest numbers too): a guess too small grew it, a second allocation and
// copy of the checkpoint in most commits.
func TestCheckpointPayloadIsAllocatedOnce(t *testing.T) {
	cp := []byte(`{"revision":7,"calls":[{"id":"c1","name":"run_js","state":"done","result_id":"r1"}]}`)
	const big = 1<<63 - 1
	for name, on := range map[string]events.Bases{
		"none":  {},
		"used":  {UsedSeq: 1<<64 - 1, UsedRev: big},
		"calls": {CallsSeq: 1<<64 - 1, CallsRev: big, CallsAt: []int{big, big, big}},
		"all": {UsedSeq: 1<<64 - 1, UsedRev: big, CallsSeq: 1<<64 - 1, CallsRev: big, CallsAt: []int{big},
			Ledger: &events.Ledger{Steps: big, InputTokens: big, OutputTokens: big}},
		"usual": {UsedSeq: 12, UsedRev: 3, CallsSeq: 14, CallsRev: 4, CallsAt: []int{2}, Ledger: &events.Ledger{Steps: 2, InputTokens: 120, OutputTokens: 40}},
	} {
		if n := testing.AllocsPerRun(10, func() { events.CheckpointPayloadWith(cp, on) }); n != 1 {
			t.Errorf("%s: %v allocations, want 1", name, n)
		}
	}
}
