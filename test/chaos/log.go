package chaos

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
)

// ReadLog reads every message of stream from sequence 1 up to the stream's
// last sequence at the time of the call, with payloads kept in the object
// store fetched. A message that does not decode becomes a Record with Err
// set (Audit reports it); an error is returned only when the log cannot be
// read.
func ReadLog(ctx context.Context, js jetstream.JetStream, stream string) ([]Record, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("chaos: stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: stream %s: %w", stream, err)
	}
	last := info.State.LastSeq
	if last == 0 || info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("chaos: read %s: %w", stream, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("chaos: read %s: %w", stream, err)
	}
	defer it.Stop()
	out := make([]Record, 0, info.State.Msgs)
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("chaos: read %s after %d messages: %w", stream, len(out), err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("chaos: read %s: metadata: %w", stream, err)
		}
		rec := Record{Seq: meta.Sequence.Stream, Subject: msg.Subject(), Time: meta.Timestamp}
		rec.Event, rec.Err = events.Decode(msg.Data())
		if rec.Err == nil && rec.Event.DataRef != nil {
			rec.Err = projections.Resolve(ctx, js, nil, &rec.Event)
		}
		out = append(out, rec)
		if rec.Seq >= last {
			return out, nil
		}
	}
}
