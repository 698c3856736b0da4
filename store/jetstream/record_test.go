package jetstream_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

var record = flag.Bool("record", false, "rewrite the recorded logs under events/testdata")

// TestRecordLogs writes the logs of real runs (one per crash-matrix
// scenario) to events/testdata/v<version>/, where the events package
// decodes them on every change. Run with -record after a deliberate schema
// change, then commit the new files next to the old ones.
func TestRecordLogs(t *testing.T) {
	if !*record {
		t.Skip("pass -record to rewrite the recorded logs")
	}
	out := filepath.Join("..", "..", "events", "testdata", "v1")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sc := range runtimetest.Scenarios()[:4] {
		nc := natstest.Connect(t, natstest.Server(t))
		h := runtimetest.NewHost(t, newStore(t, nc, jetstream.Config{}), sc.Steps...)
		if sc.Setup != nil {
			sc.Setup(h)
		}
		if _, err := h.Drive(5, nil); err != nil {
			t.Fatal(err)
		}
		js, _ := njs.New(nc)
		st, _ := js.Stream(context.Background(), "CAIRN")
		info, _ := st.Info(context.Background())
		f, err := os.Create(filepath.Join(out, sc.Name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		enc := json.NewEncoder(f)
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(context.Background(), seq)
			if err != nil {
				t.Fatal(err)
			}
			hdr := map[string]string{}
			for k := range m.Header {
				hdr[k] = m.Header.Get(k)
			}
			if err := enc.Encode(map[string]any{"subject": m.Subject, "headers": hdr, "body": json.RawMessage(m.Data)}); err != nil {
				t.Fatal(err)
			}
		}
		f.Close()
	}
}
