package actors_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// apiCounter counts JetStream API requests by kind, as the server sees
// them (a plain subscriber on $JS.API.> receives every request too).
type apiCounter struct {
	mu      sync.Mutex
	created map[string]int // direct gets of a run record, by subject
	creates int            // consumers created
	gets    []string       // every direct get's subject
}

// getsWithPrefix counts direct gets of keys under prefix (wildcard reads,
// a scan's first step, left out).
func (c *apiCounter) getsWithPrefix(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.gets {
		if strings.HasPrefix(s, prefix) && !strings.HasSuffix(s, ".>") { // a key's, not a scan's
			n++
		}
	}
	return n
}

func countAPI(t *testing.T, nc *nats.Conn) *apiCounter {
	t.Helper()
	c := &apiCounter{created: map[string]int{}}
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET.") {
			c.gets = append(c.gets, m.Subject)
		}
		switch {
		case strings.HasPrefix(m.Subject, "$JS.API.CONSUMER.CREATE.") || strings.HasPrefix(m.Subject, "$JS.API.CONSUMER.DURABLE.CREATE."):
			c.creates++
		case strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET.CAIRN.") && strings.HasSuffix(m.Subject, ".created"):
			c.created[strings.TrimPrefix(m.Subject, "$JS.API.DIRECT.GET.CAIRN.")]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

// threeChildrenCounted starts h's node on a server of its own, counts the
// server's API requests from then on, and starts a planner run (three
// children). The node closes with the test.
func threeChildrenCounted(t *testing.T, h *harness) (n *actors.Node, api *apiCounter, sess, run string) {
	t.Helper()
	srv := natstest.Server(t)
	h.nc = natstest.Connect(t, srv)
	n = h.start(t)
	t.Cleanup(func() { closeNode(t, n) })
	api = countAPI(t, natstest.Connect(t, srv))
	sess, run, err := n.Run(context.Background(), "planner", "Do three things.")
	if err != nil {
		t.Fatal(err)
	}
	return n, api, sess, run
}

// What a run costs the server in reads: a parent with three children runs
// to completion without a consumer made for it (Complete lists a run's
// children with direct gets, not a key listing, which made and deleted a
// consumer at every completion), and each run's record is read from the
// log once at most (records never change; the node keeps them, from their
// write when it wrote them).
func TestRunReadsNoConsumerAndRecordsOnce(t *testing.T) {
	n, api, sess, run := threeChildrenCounted(t, &harness{parent: threeChildren(), child: childModel{}})
	result(t, n, sess, run)
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.creates != 0 {
		t.Errorf("%d consumers created while the runs ran, want none", api.creates)
	}
	if len(api.created) > 4 {
		t.Errorf("records read of %d runs, want 4 at most (parent and three children): %v", len(api.created), api.created)
	}
	for subject, reads := range api.created {
		if reads != 1 {
			t.Errorf("%s read %d times, want once", subject, reads)
		}
	}
}

// A parked run whose actor is live starts its next attempt from its
// handle: the parent, woken once per child that finishes after it parked,
// writes one lease in all (more would be an Open per wake), and still
// completes exactly once with every child's result (the handle's window
// is read again, its fence is the session's last sequence).
func TestLiveParkedRunKeepsItsStoreHandle(t *testing.T) {
	g := &gate{}
	parked := make(chan struct{}, 16)
	h := &harness{parent: threeChildren(), child: childModel{g: g}, idle: time.Minute,
		sink: func(r events.Run, ev runtime.SinkEvent) {
			if ev.Kind == runtime.SinkWaiting && r.ParentRunID == "" {
				parked <- struct{}{}
			}
		}}
	n, api, sess, run := threeChildrenCounted(t, h)
	wakes := 0
	for _, k := range []string{"1", "2", "3"} {
		select {
		case <-parked:
		case <-time.After(30 * time.Second):
			t.Fatal("the parent did not park")
		}
		wakes++
		g.release(`{"n":` + k + `}`)
		cs, cr := actors.ChildIDs(run, map[string]string{"1": "a", "2": "b", "3": "c"}[k])
		result(t, n, cs, cr)
	}
	reply := result(t, n, sess, run)
	if string(reply.Output) != `{"answer":"all three"}` {
		t.Fatalf("reply %s", reply.Output)
	}
	completedAll(t, history(t, h.nc, sess, run))
	js, _ := jetstream.New(h.nc)
	st, err := js.Stream(context.Background(), "CAIRN")
	if err != nil {
		t.Fatal(err)
	}
	lease := events.RunLease(sess, run)
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(lease))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[lease]; got != 1 {
		t.Fatalf("the parent wrote %d leases over %d parks, want 1", got, wakes)
	}
	// Its wait, registered at the first park, is known at the next ones:
	// not read back from the bucket.
	if got := api.getsWithPrefix("$JS.API.DIRECT.GET.KV_cairn_waits.$KV.cairn_waits." + run + "."); got != 0 {
		t.Fatalf("the parent's wait registration read %d times, want 0", got)
	}
}
