package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/cairn-agents/cairn/store/jetstream"
)

func serviceServer(t *testing.T) string {
	t.Helper()
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv.ClientURL()
}

func addService(t *testing.T, url, name string, endpoints map[string]map[string]string, handle micro.HandlerFunc) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := micro.AddService(nc, micro.Config{Name: name, Version: "1.0.0", Metadata: map[string]string{"cairn": "capabilities"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for ep, meta := range endpoints {
		if err := svc.AddEndpoint(ep, handle, micro.WithEndpointMetadata(meta)); err != nil {
			t.Fatal(err)
		}
	}
}

func agentDir(t *testing.T) string {
	dir := t.TempDir()
	files := map[string]string{
		"forecaster.yaml": `slug: forecaster
instructions: Tell the weather.
model: scripted:forecaster.script.yaml
limits: {context_tokens: 8000, output_tokens: 500}
output_schema: {type: object, required: [temp], properties: {temp: {type: number}}}
capabilities: [weather.forecast]
`,
		"forecaster.script.yaml": `steps:
  - calls:
      - id: c1
        name: run_js
        args: {code: "return await caps.weather.forecast({city: 'Oslo'});"}
  - calls:
      - id: c2
        name: complete
        args: {type: output, output: {temp: 21}}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A capability served as a NATS micro service is discovered at start,
// described to the model with its effect class, and called through the
// canonical invoker.
func TestExternalCapabilityService(t *testing.T) {
	url := serviceServer(t)
	var got []string
	addService(t, url, "weather", map[string]map[string]string{"forecast": {
		"description":  "Today's forecast for a city.",
		"input_schema": `{"type":"object","required":["city"],"properties":{"city":{"type":"string"}},"additionalProperties":false}`,
		"effect":       "read-only",
	}}, func(r micro.Request) {
		got = append(got, string(r.Data()))
		_ = r.Respond([]byte(`{"city":"Oslo","temp":21}`))
	})
	dir := agentDir(t)
	var out, errb bytes.Buffer
	code := runCmd([]string{"--nats", url, filepath.Join(dir, "forecaster.yaml"), "Weather in Oslo?"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), `"temp":21`) || len(got) != 1 || got[0] != `{"city":"Oslo"}` {
		t.Fatalf("service saw %v; output:\n%s", got, out.String())
	}
}

// A service whose schema the gate rejects stops the node, naming the
// service, the endpoint and the keyword: never a silently weakened schema.
func TestExternalCapabilityBadSchema(t *testing.T) {
	url := serviceServer(t)
	addService(t, url, "weather", map[string]map[string]string{"forecast": {
		"input_schema": `{"type":"object","properties":{"city":{"type":"string","format":"city","patternProperties":{}}}}`,
	}}, func(r micro.Request) { _ = r.Respond([]byte(`{}`)) })
	dir := agentDir(t)
	var out, errb bytes.Buffer
	code := runCmd([]string{"--nats", url, filepath.Join(dir, "forecaster.yaml"), "x"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "service weather endpoint forecast: input_schema") || !strings.Contains(errb.String(), "patternProperties") {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
}
