package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// outageScript is the run_js script of TestCapabilitiesRideANATSRestart:
// a write and a read of the session's store, a call to the gate service
// that the gate holds until NATS has been restarted (so it is in flight
// when NATS goes away, and lost with it), the store again, then a call that tells the gate
// the script got to its end, with the ticket the gate handed it. Any call
// that fails throws, and the script fails before its last call.
const outageScript = `
await caps.kv.put({key: "n", value: 1});
const before = await caps.kv.get({key: "n"});
if (before.value !== 1) throw new Error("read " + JSON.stringify(before) + " after writing 1");
const ticket = await caps.gate.hold({});
await caps.kv.put({key: "n", value: 2});
const after = await caps.kv.get({key: "n"});
if (after.value !== 2) throw new Error("read " + JSON.stringify(after) + " after writing 2");
await caps.gate.finish(ticket);
return after.value;
`

// outageAgents is an agent whose one step runs outageScript.
func outageAgents(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"keeper.yaml": `slug: keeper
instructions: Keep a number.
model: scripted:keeper.script.yaml
limits: {context_tokens: 8000, output_tokens: 500}
output_schema: {type: object, required: [ok], properties: {ok: {type: boolean}}}
capabilities: [kv.get, kv.put, gate.hold, gate.finish]
`,
		"keeper.script.yaml": `steps:
  - calls:
      - id: c1
        name: run_js
        args:
          code: |
` + indent(outageScript, "            ") + `
  - calls:
      - id: c2
        name: complete
        args: {type: output, output: {ok: true}}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func indent(s, by string) string {
	out := ""
	for _, line := range splitLines(s) {
		if line != "" {
			out += by + line + "\n"
		}
	}
	return out
}

func splitLines(s string) []string {
	var lines []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		lines = append(lines, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return lines
}

// gate is the capability service of TestCapabilitiesRideANATSRestart. It
// never answers the hold calls that reach it before it is opened, as if
// each request or its reply were lost when NATS went away (the server that
// dies holds them), and tells when want of them reached it (one per
// script: none is sent again before NATS goes away). Once opened it answers
// each hold call with a ticket of its own, and collects the tickets the
// scripts hand back at their end (a finish sent again hands back the
// same one).
type gate struct {
	mu       sync.Mutex
	open     bool
	holds    int
	held     chan struct{} // closed once want calls are held
	want     int
	tickets  int
	finished map[float64]bool
}

func newGate(want int) *gate {
	return &gate{held: make(chan struct{}), finished: map[float64]bool{}, want: want}
}

func (g *gate) hold(r micro.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		if g.holds++; g.holds == g.want {
			close(g.held)
		}
		return // lost in the outage
	}
	g.tickets++
	_ = r.Respond(fmt.Appendf(nil, `{"ticket":%d}`, g.tickets))
}

func (g *gate) finish(r micro.Request) {
	var in struct {
		Ticket float64 `json:"ticket"`
	}
	if err := json.Unmarshal(r.Data(), &in); err != nil || in.Ticket == 0 {
		_ = r.Error("400", "no ticket", nil)
		return
	}
	g.mu.Lock()
	g.finished[in.Ticket] = true
	g.mu.Unlock()
	_ = r.Respond([]byte(`{"ok":true}`))
}

func (g *gate) openUp() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = true
}

// A 2 s restart of the NATS server the node uses (--nats) fails none of
// 20 scripts that call capabilities: each script that runs when the
// server goes away holds a call to a NATS service, lost with the server,
// the others wait for a worker and run after it, and each writes and
// reads the session's store (caps.kv) around that call. Before, a call whose request or
// reply was lost in the restart waited as long as the script may run
// (30 s), and the script failed with its time limit (3 of 24 in the
// issue; here every one).
func TestCapabilitiesRideANATSRestart(t *testing.T) {
	const scripts = 20
	dir := t.TempDir()
	cfg := jetstream.ServerConfig{StoreDir: filepath.Join(dir, "nats"), Port: natstest.FreePort(t)}
	srv, err := jetstream.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	url := srv.ClientURL()

	// The node runs at most jsexec.DefaultWorkers() scripts at once (its
	// pool of workers): the others wait for one, and run after the
	// restart. NATS goes away once as many as run at once hold a call.
	g := newGate(min(scripts, jsexec.DefaultWorkers()))
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := micro.AddService(nc, micro.Config{Name: "gate", Version: "1.0.0", Metadata: map[string]string{"cairn": "capabilities"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for name, ep := range map[string]struct {
		effect string
		handle micro.HandlerFunc
	}{"hold": {"read-only", g.hold}, "finish": {"idempotent", g.finish}} {
		if err := svc.AddEndpoint(name, ep.handle, micro.WithEndpointMetadata(map[string]string{
			"description": name, "effect": ep.effect, "input_schema": `{"type":"object"}`,
		})); err != nil {
			t.Fatal(err)
		}
	}

	base := serveAt(t, nodeOptions{agentsDir: outageAgents(t), natsURL: url})
	until(t, base, 200)
	runs := make([]string, scripts)
	for i := range runs {
		status, started := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"keeper","message":"Keep it."}`)
		if status != 201 {
			t.Fatalf("start %d: %d %v", i, status, started)
		}
		runs[i] = started["run_id"].(string)
	}
	select {
	case <-g.held:
	case <-time.After(2 * time.Minute):
		g.mu.Lock()
		n := g.holds
		g.mu.Unlock()
		t.Fatalf("%d of %d scripts got to their held call in two minutes", n, g.want)
	}

	// Every script running has a call in flight: the server goes away for
	// 2 s.
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the outage itself, not a wait for an event
	if srv, err = jetstream.StartServer(cfg); err != nil {
		t.Fatalf("restart: %v", err)
	}
	g.openUp()

	for _, run := range runs {
		if types, _ := sse(t, base, "alice-token", run); len(types) == 0 || types[len(types)-1] != "end" {
			t.Fatalf("events of run %s: %v, want its events to the end", run, types)
		}
		if status, got := call(t, "GET", base+"/v1/runs/"+run, "alice-token", ""); status != 200 || got["status"] != "completed" {
			t.Fatalf("run %s: %d %v, want completed", run, status, got)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.finished) != scripts {
		t.Fatalf("%d of %d scripts got to their end: the others failed in the restart", len(g.finished), scripts)
	}
}

// A call in flight when the connection drops is sent again once NATS is
// back when its capability may be delivered twice (read-only,
// idempotent), and fails at once as of unknown outcome when it is
// effectful: the service may have acted on it.
func TestServiceCallAcrossADrop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		again bool
	}{{"read-only", true}, {"effectful", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := jetstream.ServerConfig{StoreDir: t.TempDir(), Port: natstest.FreePort(t)}
			srv, err := jetstream.StartServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close(context.Background()) })
			connect := func() *nats.Conn {
				nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				return nc
			}
			service, caller := connect(), connect()
			arrived := make(chan struct{}, 4)
			var mu sync.Mutex
			seen := 0
			sub, err := service.Subscribe("svc.call", func(m *nats.Msg) {
				mu.Lock()
				seen++
				first := seen == 1
				mu.Unlock()
				arrived <- struct{}{}
				if !first { // the first is lost with the server
					_ = m.Respond([]byte(`{"ok":true}`))
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			if err := service.Flush(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), serviceCallTimeout)
			defer cancel()
			type answer struct {
				reply *nats.Msg
				err   error
			}
			done := make(chan answer, 1)
			go func() {
				reply, err := serviceRequest(ctx, caller, nats.NewMsg("svc.call"), tc.again)
				done <- answer{reply, err}
			}()
			<-arrived
			if err := srv.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if srv, err = jetstream.StartServer(cfg); err != nil {
				t.Fatalf("restart: %v", err)
			}
			a := <-done
			mu.Lock()
			n := seen
			mu.Unlock()
			switch {
			case tc.again && (a.err != nil || string(a.reply.Data) != `{"ok":true}` || n != 2):
				t.Fatalf("after the drop: %v, %v, the service saw %d calls; want the answer to the call sent again", a.reply, a.err, n)
			case !tc.again && (!errors.Is(a.err, errOutcomeUnknown) || n != 1):
				t.Fatalf("after the drop: %v, the service saw %d calls; want %v and one call", a.err, n, errOutcomeUnknown)
			}
		})
	}
}
