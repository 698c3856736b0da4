// Command consumer is a minimal external consumer of Cairn's log: it
// follows one run's (or one session's) events over NATS and prints one line
// per event, until the run completes or ends. It needs nothing from Cairn
// but the events package (the log's schema); see docs/events.md.
//
//	go run ./examples/consumer --nats nats://127.0.0.1:4222 --session s-... --run r-...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server URL")
	session := flag.String("session", "", "session ID (required)")
	run := flag.String("run", "", "run ID; empty follows the whole session")
	keysFile := flag.String("payload-keys", "", "the node's --payload-keys file, when it seals the log")
	flag.Parse()
	if *session == "" {
		fmt.Fprintln(os.Stderr, "consumer: --session is required")
		os.Exit(2)
	}
	var keys *events.Keyring
	if *keysFile != "" {
		b, err := os.ReadFile(*keysFile)
		if err == nil {
			keys, err = events.ParseKeyring(string(b))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "consumer: --payload-keys:", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	nc, err := nats.Connect(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
	if err := follow(ctx, js, keys, *session, *run, os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

// follow prints the events of a run (or of a whole session when run is
// empty) from the first one, in order, and returns when the run completes
// or ends (never, for a session: until ctx ends). keys open sealed events
// (nil: the log is plain; a sealed event is then skipped, saying so).
func follow(ctx context.Context, js jetstream.JetStream, keys *events.Keyring, session, run string, w io.Writer) error {
	if err := events.ValidID(session); err != nil {
		return fmt.Errorf("--session: %w", err)
	}
	filter := events.SessionAll(session)
	if run != "" {
		if err := events.ValidID(run); err != nil {
			return fmt.Errorf("--run: %w", err)
		}
		filter = events.RunAll(session, run)
	}
	st, err := js.Stream(ctx, events.DefaultStream)
	if err != nil {
		return err
	}
	// An ordered consumer: in order, from sequence 1, nothing left on the
	// server when it stops. A durable consumer would resume after a restart
	// instead (projections.Runner does that).
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		meta, _ := m.Metadata()
		e, err := keys.Decode(m.Data())
		if err != nil {
			// A newer schema version, an unknown type, or sealed with a
			// key not given: skip, do not stop.
			fmt.Fprintf(w, "%d skipped: %v\n", meta.Sequence.Stream, err)
			continue
		}
		fmt.Fprintf(w, "%d %s %s\n", meta.Sequence.Stream, e.Type, describe(e))
		if run != "" && (e.Type == events.RunEnded || isDone(m.Subject())) {
			return nil
		}
	}
}

// describe says what an event means, in one line.
func describe(e events.Envelope) string {
	switch e.Type {
	case events.RunCreated:
		var r events.Run
		if e.Payload(&r) == nil {
			return fmt.Sprintf("run %s of %s (root %s, parent %q)", r.RunID, r.Agent, r.RootRunID, r.ParentRunID)
		}
	case events.LeaseAcquired:
		var l events.Lease
		if e.Payload(&l) == nil {
			return fmt.Sprintf("run %s attempt by %s, epoch %d", e.RunID, l.Holder, l.Epoch)
		}
	case events.CheckpointCommitted:
		if e.DataRef != nil {
			return fmt.Sprintf("run %s revision %d (payload in %s/%s)", e.RunID, e.Revision, e.DataRef.Bucket, e.DataRef.Key)
		}
		var p events.Checkpoint
		if e.Payload(&p) == nil {
			cp := p.Checkpoint
			s := fmt.Sprintf("run %s revision %d phase %s step %d, %d messages appended", e.RunID, cp.Revision, cp.Phase, cp.Step, len(cp.Append))
			if cp.Reply != nil {
				s += fmt.Sprintf(", reply %s", cp.Reply.Type)
			}
			return s
		}
	case events.WindowCompacted:
		var c events.Compaction
		if e.Payload(&c) == nil {
			return fmt.Sprintf("session %s window compacted (%s) by run %s", e.SessionID, c.Compaction.Reason, c.RunID)
		}
	case events.RunEnded:
		var end events.Ended
		if e.Payload(&end) == nil {
			return fmt.Sprintf("run %s %s: %s", e.RunID, end.Status, end.Reason)
		}
	}
	return "run " + e.RunID
}

// isDone reports whether subject is a run's completed commit.
func isDone(subject string) bool {
	s, err := events.ParseSubject(subject)
	return err == nil && s.Kind == events.KindDone
}
