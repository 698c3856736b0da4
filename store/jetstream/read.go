package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// scanBatch is how many messages one batched direct get asks for.
const scanBatch = 512

// scanCheckpoints calls fn with every checkpoint commit of a session from
// stream sequence start on, in order.
func (s *Store) scanCheckpoints(ctx context.Context, sessionID string, start uint64, fn func(*runtime.Checkpoint)) error {
	filter := events.SessionCheckpoints(sessionID)
	last, err := s.last(ctx, filter)
	if err != nil || last == nil || last.Sequence < start {
		return err
	}
	return s.scan(ctx, filter, start, last.Sequence, func(m *rawMsg) error {
		e, err := s.cfg.Keys.Decode(m.data)
		if err == nil {
			err = s.resolve(ctx, &e)
		}
		var p events.Checkpoint
		if err == nil {
			err = e.Payload(&p)
		}
		if err != nil {
			return fmt.Errorf("jetstream: %s seq %d: %w", m.subject, m.seq, err)
		}
		fn(&p.Checkpoint)
		return nil
	})
}

type rawMsg struct {
	subject string
	seq     uint64
	header  nats.Header
	data    []byte
}

// Scan calls fn with every message on filter (wildcards allowed), in
// stream order, at least up to the filter's last message when the call
// began and on to the end of the stream as the last batch finds it: on a
// stream that keeps one message per subject (a KV bucket), a subject
// written again during the scan loses the revision the scan has not read
// yet, and its new one is past the start's last message. It reads with
// batched direct gets, so unlike a KV key listing or a watcher it creates
// no consumer on the server.
func (w *Log) Scan(ctx context.Context, filter string, fn func(subject string, seq uint64, header nats.Header, data []byte) error) error {
	var end uint64
	if w.replicas > 1 {
		// The leader's last message: a follower that is behind must be
		// waited for. A single replica is read to its end without it.
		last, err := w.last(ctx, filter)
		if err != nil || last == nil {
			return err
		}
		end = last.Sequence
	}
	return w.scanFrom(ctx, filter, 1, end, true, func(m *rawMsg) error { return fn(m.subject, m.seq, m.header, m.data) })
}

// scan reads every message matching filter from start to end (inclusive) with
// batched direct gets: no consumer is created, so a read leaves nothing
// behind on the server. The protocol (server 2.11+): a request on
// $JS.API.DIRECT.GET.<stream> with {"batch", "next_by_subj", "seq"} is
// answered with one message per match, then a 204 status carrying
// Nats-Num-Pending and Nats-Last-Sequence; no match at all is one 404.
func (w *Log) scan(ctx context.Context, filter string, start, end uint64, fn func(*rawMsg) error) error {
	return w.scanFrom(ctx, filter, start, end, false, fn)
}

// scanFrom is scan; with toEnd it goes on past end to the end of the
// stream (the server has nothing pending for the filter).
func (w *Log) scanFrom(ctx context.Context, filter string, start, end uint64, toEnd bool, fn func(*rawMsg) error) error {
	subj := "$JS.API.DIRECT.GET." + w.name
	seen := start - 1
	track := func(m *rawMsg) error {
		seen = m.seq
		return fn(m)
	}
	for catchUp := 0; ; catchUp++ {
		from := seen + 1
		for toEnd || from <= end {
			req, _ := json.Marshal(map[string]any{"batch": scanBatch, "next_by_subj": filter, "seq": from})
			inbox, in, closeFn, err := w.replies.open()
			if err != nil {
				return fmt.Errorf("jetstream: scan %s: %w", filter, err)
			}
			next, done, err := w.scanBatch(ctx, in, subj, inbox, req, end, toEnd, track)
			closeFn()
			if err != nil {
				return fmt.Errorf("jetstream: scan %s from %d: %w", filter, from, err)
			}
			if done {
				break
			}
			from = next
		}
		// end is the leader's last matching sequence. A direct get answered
		// by a follower that is behind stops short of it: wait (bounded) for
		// the follower and read on from where it stopped.
		if seen >= end || w.replicas <= 1 {
			return nil
		}
		// Unless the message at end is gone (a KV marker that expired, a
		// message deleted): then the leader's last is what there is to
		// reach, and it may be what was seen already.
		if last, err := w.last(ctx, filter); err == nil && (last == nil || last.Sequence <= seen) {
			return nil
		}
		if catchUp >= w.retries {
			return fmt.Errorf("jetstream: scan %s: the replica answering stopped at %d, the leader has %d: %w", filter, seen, end, errReplicaBehind)
		}
		if err := w.sleep(ctx, catchUp); err != nil {
			return err
		}
	}
}

func (w *Log) scanBatch(ctx context.Context, in *inbox, subj, inbox string, req []byte, end uint64, toEnd bool, fn func(*rawMsg) error) (next uint64, done bool, err error) {
	if err := w.nc.PublishRequest(subj, inbox, req); err != nil {
		return 0, false, err
	}
	for {
		m, err := in.receive(ctx)
		if err != nil {
			return 0, false, err
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204": // end of batch
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				lastSeq, _ := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
				if pending == 0 || (lastSeq >= end && !toEnd) {
					return 0, true, nil
				}
				return lastSeq + 1, false, nil
			case "404":
				return 0, true, nil
			default:
				return 0, false, fmt.Errorf("direct get status %s %s", status, m.Header.Get("Description"))
			}
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("direct get reply without a sequence: %w", err)
		}
		if seq > end && !toEnd {
			continue // written after the scan began; the caller asked up to end
		}
		if err := fn(&rawMsg{subject: m.Header.Get("Nats-Subject"), seq: seq, header: m.Header, data: m.Data}); err != nil {
			return 0, false, err
		}
	}
}

// maxLasts is the most subjects one multi-last direct get may answer
// with; the server refuses more (413), and Lasts then reads filter by filter.
const maxLasts = 1024

// Lasts returns, for each filter (wildcards allowed), what Last would: the
// last message matching it, nil when none. On a single-replica stream it
// asks once (a multi-last direct get, server 2.11+) instead of once per
// filter, so every answer comes from one moment of the stream. A
// replicated stream is read filter by filter from its leader, as Last
// reads it: a direct get may be answered by a follower that is behind.
// A wildcard filter costs a message per subject it matches: Lasts is for
// filters that match a few subjects.
func (w *Log) Lasts(ctx context.Context, filters ...string) ([]*jetstream.RawStreamMsg, error) {
	if len(filters) == 0 {
		return nil, nil
	}
	for i, f := range filters {
		if err := validFilter(f); err != nil {
			return nil, fmt.Errorf("jetstream: lasts: filters[%d]: %w", i, err)
		}
	}
	if w.replicas <= 1 {
		out, ok, err := w.multiLast(ctx, filters)
		if err != nil {
			return nil, fmt.Errorf("jetstream: lasts: %w", err)
		}
		if ok {
			return out, nil
		}
	}
	out := make([]*jetstream.RawStreamMsg, len(filters))
	for i, f := range filters {
		m, err := w.last(ctx, f)
		if err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// multiLast asks for the last message of every subject matching filters
// and keeps, per filter, the latest. ok is false whenever the answer is not
// known to be whole: too many subjects or bytes for one answer, a message
// the server failed to load, a lost reply, a server restarting. The caller
// then reads filter by filter, with Last's retries and its errors. But
// when the connection is down, or no answer came in time, err says so
// (Unavailable): reading on filter by filter would wait as long again for
// each.
func (w *Log) multiLast(ctx context.Context, filters []string) (out []*jetstream.RawStreamMsg, ok bool, err error) {
	req, _ := json.Marshal(map[string]any{"multi_last": filters, "batch": maxLasts})
	inbox, in, closeFn, err := w.replies.open()
	if err != nil {
		return nil, false, nil
	}
	defer closeFn()
	if err := w.nc.PublishRequest("$JS.API.DIRECT.GET."+w.name, inbox, req); err != nil {
		return nil, false, nil
	}
	out = make([]*jetstream.RawStreamMsg, len(filters))
	received := false
	for {
		m, err := in.receive(ctx)
		if err != nil {
			if w.down() || (errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil) {
				return nil, false, err
			}
			return nil, false, nil
		}
		if status := m.Header.Get("Status"); status != "" {
			switch {
			case status == "204": // end of batch: whole unless the server stopped early
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return out, pending == 0, nil
			case status == "404" && !received && m.Header.Get("Description") == "No Results":
				return out, true, nil // no subject matched
			default:
				// 413: too many subjects; 404 after messages: a resolved
				// message failed to load; anything else: read one by one.
				return nil, false, nil
			}
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return nil, false, nil
		}
		received = true
		subject := m.Header.Get("Nats-Subject")
		var msg *jetstream.RawStreamMsg
		for i, f := range filters {
			if !events.SubjectMatches(f, subject) || (out[i] != nil && out[i].Sequence >= seq) {
				continue
			}
			if msg == nil {
				msg = &jetstream.RawStreamMsg{Subject: subject, Sequence: seq, Header: m.Header, Data: m.Data}
				if ts, err := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp")); err == nil {
					msg.Time = ts
				}
			}
			out[i] = msg
		}
	}
}

// validFilter refuses what is not a subject filter: empty tokens, spaces,
// a '>' before the last token, wildcards inside a token.
func validFilter(f string) error {
	if f == "" {
		return errors.New("empty subject filter")
	}
	if strings.ContainsAny(f, " \t\r\n") {
		return fmt.Errorf("subject filter %q has white space", f)
	}
	toks := strings.Split(f, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return fmt.Errorf("subject filter %q has an empty token", f)
		case t == ">" && i != len(toks)-1:
			return fmt.Errorf("subject filter %q has '>' before its last token", f)
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("subject filter %q has a wildcard inside a token", f)
		}
	}
	return nil
}
