package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/store/jetstream"
)

// The reader cannot delete, change, pull from or acknowledge on the node's
// durable consumers (before, it was granted CONSUMER.DELETE on the whole
// stream: it could delete the completion consumer, and pull and
// acknowledge the completions meant for the node's parents). It still
// makes consumers of its own: a named pull consumer, natscli's stream
// view (a durable "stream_pager_..." in memory, created, read and
// deleted), and ordered consumers of both nats.go APIs.
func TestAuthReaderCannotTouchTheNodesConsumers(t *testing.T) {
	srv, creds := authServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	s := newStore(t, admin, jetstream.Config{})
	h, err := s.Open(ctx, "sess", "run")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SaveCheckpoint(ctx, cp(1, text("m1", "x"))); err != nil {
		t.Fatal(err)
	}
	ajs, _ := njs.New(admin)
	ast, err := ajs.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	nodes := jetstream.NodeConsumers()
	if len(nodes) == 0 {
		t.Fatal("no node consumers listed")
	}
	for _, name := range nodes {
		if _, err := ast.CreateOrUpdateConsumer(ctx, njs.ConsumerConfig{Durable: name, AckPolicy: njs.AckExplicitPolicy, AckWait: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}

	reader, err := nats.Connect(srv.Addr(), nats.UserInfo(jetstream.ReaderUser, creds.Reader), nats.MaxReconnects(0),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	js, err := njs.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	// A refused API request is never answered: each waits a second.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, time.Second)
		t.Cleanup(cancel)
		return c
	}
	for _, name := range nodes {
		if err := st.DeleteConsumer(short(), name); err == nil {
			t.Errorf("the reader deleted the node's consumer %s", name)
		}
		if _, err := st.UpdateConsumer(short(), njs.ConsumerConfig{Durable: name, AckPolicy: njs.AckExplicitPolicy, AckWait: time.Hour}); err == nil {
			t.Errorf("the reader changed the node's consumer %s", name)
		}
		// The legacy ephemeral endpoint names the consumer in the body,
		// where no permission looks.
		legacy, _ := json.Marshal(map[string]any{"stream_name": "CAIRN", "config": map[string]any{"name": name, "ack_policy": "explicit", "ack_wait": int64(time.Hour), "deliver_policy": "all"}})
		_, _ = reader.RequestWithContext(short(), "$JS.API.CONSUMER.CREATE.CAIRN", legacy)
		// Pulling would take the node's completions, acknowledging them
		// would lose them.
		next, _ := json.Marshal(map[string]any{"batch": 1, "expires": int64(500 * time.Millisecond)})
		if m, err := reader.RequestWithContext(short(), fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.CAIRN.%s", name), next); err == nil && len(m.Data) > 0 {
			t.Errorf("the reader pulled %q from the node's consumer %s", m.Subject, name)
		}
		c, err := ast.Consumer(ctx, name)
		if err != nil {
			t.Fatalf("the node's consumer %s: %v", name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.AckWait != 10*time.Second || info.Delivered.Consumer != 0 || info.NumAckPending != 0 {
			t.Errorf("the node's consumer %s after the reader: ack wait %s, delivered %d, pending acks %d", name, info.Config.AckWait, info.Delivered.Consumer, info.NumAckPending)
		}
	}

	// The reader's own consumers.
	for _, cc := range []njs.ConsumerConfig{
		{Durable: "reader_audit", AckPolicy: njs.AckExplicitPolicy},
		// natscli's stream view (jsm.go's StreamPager).
		{Durable: "stream_pager_4242" + fmt.Sprint(time.Now().UnixNano()), AckPolicy: njs.AckExplicitPolicy, MemoryStorage: true, Replicas: 1, InactiveThreshold: time.Hour, FilterSubject: "cairn.>"},
	} {
		c, err := st.CreateConsumer(ctx, cc)
		if err != nil {
			t.Fatalf("the reader's consumer %s: %v", cc.Durable, err)
		}
		m, err := c.Next(njs.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("%s: next: %v", cc.Durable, err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("%s: ack: %v", cc.Durable, err)
		}
		if err := st.DeleteConsumer(ctx, cc.Durable); err != nil {
			t.Fatalf("%s: delete: %v", cc.Durable, err)
		}
	}
	oc, err := st.OrderedConsumer(ctx, njs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	if _, err := oc.Next(njs.FetchMaxWait(5 * time.Second)); err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	ljs, _ := reader.JetStream()
	sub, err := ljs.SubscribeSync("cairn.>", nats.OrderedConsumer(), nats.BindStream("CAIRN"))
	if err != nil {
		t.Fatalf("push ordered consumer: %v", err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("push ordered consumer: %v", err)
	}
	_ = sub.Unsubscribe()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("out of time")
	}
}
