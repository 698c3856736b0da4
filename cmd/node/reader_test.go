package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// Every durable consumer a serving node keeps on the run log is one the
// reader may not touch (jetstream.NodeConsumers): a durable the node
// starts keeping without adding it there fails here. And the reader,
// with the line node creds prints, reads the log as natscli's stream view
// does (a durable of its own in memory, read and deleted) but cannot
// delete the node's.
func TestNodeDurablesAreReservedFromTheReader(t *testing.T) {
	dir := t.TempDir()
	base, natsURL := servingNATS(t, dir)
	status, started := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if status != 201 {
		t.Fatalf("start: %d %v", status, started)
	}
	run := started["run_id"].(string)
	if types, _ := sse(t, base, "alice-token", run); len(types) == 0 || types[len(types)-1] != "end" {
		t.Fatalf("events of the run: %v, want its events to the end", types)
	}
	creds, err := jetstream.LoadCredentials(credentialsPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := nats.Connect(natsURL, nats.UserInfo(jetstream.AdminUser, creds.Admin), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := njs.New(admin)
	ast, err := ajs.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	var durables []string
	for info := range ast.ListConsumers(ctx).Info() {
		if info.Config.Durable != "" {
			durables = append(durables, info.Name)
		}
	}
	if len(durables) == 0 {
		t.Fatal("the node keeps no durable consumer on the log: the test sees nothing")
	}
	for _, d := range durables {
		if !slices.Contains(jetstream.NodeConsumers(), d) {
			t.Errorf("the node's durable consumer %s is not in jetstream.NodeConsumers: the reader may delete it", d)
		}
	}

	// The reader, as node creds tells it to connect.
	reader, err := nats.Connect(natsURL, nats.UserInfo(jetstream.ReaderUser, creds.Reader), nats.MaxReconnects(0),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	js, _ := njs.New(reader)
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	pager := "stream_pager_4242" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	c, err := st.CreateConsumer(ctx, njs.ConsumerConfig{Durable: pager, AckPolicy: njs.AckExplicitPolicy, MemoryStorage: true, Replicas: 1, InactiveThreshold: time.Hour})
	if err != nil {
		t.Fatalf("stream view's consumer: %v", err)
	}
	if _, err := c.Next(njs.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatalf("stream view's consumer: next: %v", err)
	}
	if err := st.DeleteConsumer(ctx, pager); err != nil {
		t.Fatalf("stream view's consumer: delete: %v", err)
	}
	for _, d := range durables {
		short, cancel := context.WithTimeout(ctx, time.Second) // a refused request is never answered
		err := st.DeleteConsumer(short, d)
		cancel()
		if err == nil {
			t.Errorf("the reader deleted the node's consumer %s", d)
		}
		if _, err := ast.Consumer(ctx, d); err != nil {
			t.Errorf("the node's consumer %s after the reader's delete: %v", d, err)
		}
	}
}
