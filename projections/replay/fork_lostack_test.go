package replay_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// A fork whose run record's acknowledgement is lost (the record stored,
// its answer never received) still forks, and once: the store settles the
// lost answer from the log rather than failing a fork it wrote, and
// nothing is written twice.
func TestForkLostAcknowledgement(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	_, orig := env.driven(t) // scenario 0: two run_js calls, then complete

	// The fork writes through its own store, on a connection that loses
	// what it is told to: a real publish, stored by the server, whose
	// answer the client never sees.
	loser := &ackLoser{}
	nc, err := nats.Connect(env.srv.ClientURL(), nats.SetCustomDialer(loser))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := jetstream.New(ctx, nc, jetstream.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })

	loser.lose.Store(1) // the fork's first write: the run record
	rec, err := replay.Fork(ctx, s, orig, replay.ForkOptions{SessionID: "fork-lost", RunID: "fl", At: 1})
	if err != nil {
		t.Fatalf("fork whose record's acknowledgement was lost: %v", err)
	}
	if n := loser.lost.Load(); n != 1 {
		t.Fatalf("%d acknowledgements lost, want 1: the test lost nothing", n)
	}
	fork, err := replay.LoadIn(ctx, replay.Source{JS: env.js}, rec.SessionID, rec.RunID)
	if err != nil {
		t.Fatal(err)
	}
	var created int
	var revs []int64
	for _, e := range fork.Events {
		switch e.Type {
		case events.RunCreated:
			created++
		case events.CheckpointCommitted:
			revs = append(revs, e.Revision)
		}
	}
	if created != 1 || fmt.Sprint(revs) != "[1]" {
		t.Fatalf("the fork's session holds %d run records and revisions %v, want 1 record and [1]", created, revs)
	}
	// It resumes like any fork: with the same model, to the same end.
	fh := runtimetest.NewHost(t, env.s, runtimetest.Scenarios()[0].Steps...)
	fh.Session, fh.Run = rec.SessionID, rec.RunID
	if _, err := fh.Drive(10, nil); err != nil {
		t.Fatal(err)
	}
}

// ackLoser dials connections that lose JetStream publish acknowledgements
// on their way from the server while lose is above zero, counting them in
// lost. The server stored the message: only its answer is gone, as when a
// connection drops it.
type ackLoser struct {
	lose, lost atomic.Int32
}

func (d *ackLoser) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: c, d: d}, nil
}

// take reports whether the next acknowledgement is to be lost.
func (d *ackLoser) take() bool {
	for {
		n := d.lose.Load()
		if n <= 0 {
			return false
		}
		if d.lose.CompareAndSwap(n, n-1) {
			d.lost.Add(1)
			return true
		}
	}
}

// lossyConn passes the server's protocol through whole frames at a time,
// leaving out the acknowledgements its dialer takes.
type lossyConn struct {
	net.Conn
	d       *ackLoser
	in, out []byte // read from the server, not yet framed; framed, for the client
	err     error
}

func (c *lossyConn) Read(p []byte) (int, error) {
	buf := make([]byte, 32<<10)
	for len(c.out) == 0 && c.err == nil {
		n, err := c.Conn.Read(buf)
		c.in = append(c.in, buf[:n]...)
		c.err = err
		c.frame()
	}
	if len(c.out) == 0 {
		return 0, c.err
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// frame moves every complete frame of in to out: a protocol line, or a
// message with its payload. A message whose payload is a publish
// acknowledgement ({"stream":...) is dropped when the dialer takes it.
func (c *lossyConn) frame() {
	for {
		eol := bytes.Index(c.in, []byte("\r\n"))
		if eol < 0 {
			return
		}
		n := eol + 2
		line := c.in[:eol]
		if msg := bytes.HasPrefix(line, []byte("MSG ")); msg || bytes.HasPrefix(line, []byte("HMSG ")) {
			f := bytes.Fields(line)
			size, err := strconv.Atoi(string(f[len(f)-1]))
			if err != nil {
				c.err = fmt.Errorf("lossyConn: bad message line %q: %w", line, err)
				return
			}
			if len(c.in) < n+size+2 {
				return // the payload is still on its way
			}
			payload := c.in[n : n+size]
			n += size + 2
			if msg && bytes.HasPrefix(payload, []byte(`{"stream":`)) && c.d.take() {
				c.in = c.in[n:]
				continue
			}
		}
		c.out = append(c.out, c.in[:n]...)
		c.in = c.in[n:]
	}
}
