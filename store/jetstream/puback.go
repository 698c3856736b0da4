package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// request is the single-publish path's round trip: what jetstream's
// PublishMsg does for a message whose headers (Msg-Id, fence) the caller
// has set, with the acknowledgement read by parseAck. A lone run waits for
// one of these per call, and PublishMsg's reflective decoding of the
// answer was ~1.5 µs of it (a CPU profile of B2, 2026-12-04). ctx carries
// the try's deadline (publish bounds each try by opTimeout).
func (w *Log) request(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	resp, err := w.nc.RequestMsgWithContext(ctx, msg)
	// As PublishMsg: no responders is retried a few times, a blip of a
	// stream leader's election.
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = w.nc.RequestMsgWithContext(ctx, msg)
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, jetstream.ErrNoStreamResponse
		}
		return nil, err
	}
	return parseAck(resp.Data)
}

// parseAck reads a publish's acknowledgement as jetstream's PublishMsg
// does: a stored message's PubAck, or the server's error as an
// *jetstream.APIError, or ErrInvalidJSAck. The server answers a stored
// message with {"stream":"S","seq":N} (and "duplicate":true for a
// duplicate): quickAck reads exactly that shape by hand; anything else,
// every error answer among it, is decoded with encoding/json.
func parseAck(data []byte) (*jetstream.PubAck, error) {
	if ack, ok := quickAck(data); ok {
		return ack, nil
	}
	var r struct {
		// Type as nats.go has it: an answer whose "type" is not a string
		// is refused there, and so here.
		Type  string              `json:"type"`
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return nil, fmt.Errorf("nats: %w", r.Error)
	}
	if r.PubAck == nil || r.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return r.PubAck, nil
}

// quickAck reads an acknowledgement made only of "stream" (a non-empty
// string of printable ASCII with no escapes), "seq" (a uint64 in plain
// digits) and at most a "duplicate" (true or false), each once, with no
// whitespace: the server's compact encoding of a stored message's answer.
// ok is false for anything else, which the caller decodes in full: quickAck
// never decides a value encoding/json would read differently
// (FuzzQuickAckAgreesWithJSON).
func quickAck(b []byte) (_ *jetstream.PubAck, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	var ack jetstream.PubAck
	var haveStream, haveSeq, haveDup bool
	i := 1
	for {
		key, next, ok := quickString(b, i)
		if !ok || next >= len(b) || b[next] != ':' {
			return nil, false
		}
		i = next + 1
		switch string(key) {
		case "stream":
			s, next, ok := quickString(b, i)
			if haveStream || !ok || len(s) == 0 {
				return nil, false
			}
			ack.Stream, haveStream, i = string(s), true, next
		case "seq":
			j := i
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			if haveSeq || j == i || (b[i] == '0' && j > i+1) {
				return nil, false
			}
			n, err := strconv.ParseUint(string(b[i:j]), 10, 64)
			if err != nil {
				return nil, false
			}
			ack.Sequence, haveSeq, i = n, true, j
		case "duplicate":
			switch {
			case haveDup:
				return nil, false
			case hasAt(b, i, "true"):
				ack.Duplicate, i = true, i+4
			case hasAt(b, i, "false"):
				i += 5
			default:
				return nil, false
			}
			haveDup = true
		default:
			return nil, false
		}
		switch {
		case i == len(b)-1: // the closing brace
			if !haveStream || !haveSeq {
				return nil, false
			}
			return &ack, true
		case b[i] == ',':
			i++
		default:
			return nil, false
		}
	}
}

// quickString reads a JSON string at b[i] made of printable ASCII other
// than the quote and the backslash, and returns its contents and the index
// after its closing quote.
func quickString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func hasAt(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}
