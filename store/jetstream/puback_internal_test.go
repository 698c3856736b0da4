package jetstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// jsonAck is how jetstream's PublishMsg reads an acknowledgement (its
// publishMsg, nats.go v1.55.0), the reference parseAck must agree with.
func jsonAck(data []byte) (*jetstream.PubAck, error) {
	var r struct {
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

func TestParseAck(t *testing.T) {
	for _, tc := range []struct {
		in    string
		quick bool // read by hand, not by encoding/json
		want  *jetstream.PubAck
		err   error
		code  jetstream.ErrorCode
	}{
		{in: `{"stream":"CAIRN","seq":42}`, quick: true, want: &jetstream.PubAck{Stream: "CAIRN", Sequence: 42}},
		{in: `{"seq":7,"stream":"KV_b"}`, quick: true, want: &jetstream.PubAck{Stream: "KV_b", Sequence: 7}},
		{in: `{"stream":"CAIRN","seq":42,"duplicate":true}`, quick: true, want: &jetstream.PubAck{Stream: "CAIRN", Sequence: 42, Duplicate: true}},
		{in: `{"stream":"CAIRN","seq":0,"duplicate":false}`, quick: true, want: &jetstream.PubAck{Stream: "CAIRN"}},
		{in: `{"stream":"CAIRN","seq":18446744073709551615}`, quick: true, want: &jetstream.PubAck{Stream: "CAIRN", Sequence: 1<<64 - 1}},
		// Shapes the hand reader leaves to encoding/json, decided as before.
		{in: `{"stream":"CAIRN","seq":42,"domain":"hub"}`, want: &jetstream.PubAck{Stream: "CAIRN", Sequence: 42, Domain: "hub"}},
		{in: `{ "stream": "CAIRN", "seq": 42 }`, want: &jetstream.PubAck{Stream: "CAIRN", Sequence: 42}},
		{in: `{"Stream":"CAIRN","SEQ":42}`, want: &jetstream.PubAck{Stream: "CAIRN", Sequence: 42}},
		{in: `{"stream":"C\u0041IRN","seq":42}`, want: &jetstream.PubAck{Stream: "CAIRN", Sequence: 42}},
		{in: `{"stream":"A","stream":"B","seq":1}`, want: &jetstream.PubAck{Stream: "B", Sequence: 1}},
		{in: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}`, code: jetstream.JSErrCodeStreamWrongLastSequence},
		{in: `{"stream":"CAIRN","seq":3,"error":{"code":503,"err_code":10158,"description":"in process"}}`, code: 10158},
		{in: `{"type":1,"stream":"S","seq":1}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"TYPE":[],"error":{"code":400,"err_code":10071}}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"type":"io.nats.jetstream.api.v1.pub_ack","stream":"S","seq":1}`, want: &jetstream.PubAck{Stream: "S", Sequence: 1}},
		{in: `{"stream":"","seq":42}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"seq":42}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"stream":"CAIRN","seq":042}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"stream":"CAIRN","seq":18446744073709551616}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"stream":"CAIRN","seq":-1}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"stream":"CAIRN","seq":42,}`, err: jetstream.ErrInvalidJSAck},
		{in: `{"stream":"CAIRN","seq":42`, err: jetstream.ErrInvalidJSAck},
		{in: ``, err: jetstream.ErrInvalidJSAck},
		{in: `null`, err: jetstream.ErrInvalidJSAck},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, quick := quickAck([]byte(tc.in))
			if quick != tc.quick {
				t.Errorf("read by hand: %v, want %v", quick, tc.quick)
			}
			got, err := parseAck([]byte(tc.in))
			var api *jetstream.APIError
			switch {
			case tc.code != 0:
				if !errors.As(err, &api) || api.ErrorCode != tc.code {
					t.Fatalf("got %v, %v; want the API error %d", got, err, tc.code)
				}
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Fatalf("got %v, %v; want %v", got, err, tc.err)
				}
			case err != nil || !reflect.DeepEqual(got, tc.want):
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			ref, rerr := jsonAck([]byte(tc.in))
			if !reflect.DeepEqual(got, ref) || fmt.Sprint(err) != fmt.Sprint(rerr) {
				t.Errorf("parseAck: %+v, %v; PublishMsg's reading: %+v, %v", got, err, ref, rerr)
			}
		})
	}
}

// FuzzQuickAckAgreesWithJSON: an acknowledgement read by hand reads as
// PublishMsg's decoding reads it; what the hand reader refuses, parseAck
// decodes exactly as PublishMsg does. The answer comes from the server,
// over a connection an operator may point anywhere.
func FuzzQuickAckAgreesWithJSON(f *testing.F) {
	for _, s := range []string{
		`{"stream":"CAIRN","seq":42}`, `{"stream":"CAIRN","seq":42,"duplicate":true}`,
		`{"seq":1,"duplicate":false,"stream":"KV_x"}`, `{"error":{"code":400,"err_code":10071}}`,
		`{"stream":"a\"b","seq":1}`, `{"type":1,"stream":"S","seq":1}`, `{"stream":"CAIRN","seq":1e3}`, `{"stream":"\u00e9","seq":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseAck(data)
		ref, rerr := jsonAck(data)
		if !reflect.DeepEqual(got, ref) || fmt.Sprint(err) != fmt.Sprint(rerr) {
			t.Fatalf("%q: parseAck %+v, %v; PublishMsg's reading %+v, %v", data, got, err, ref, rerr)
		}
	})
}

func BenchmarkParseAck(b *testing.B) {
	ack := []byte(`{"stream":"CAIRN","seq":123456789}`)
	b.Run("quick", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseAck(ack); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonAck(ack); err != nil {
				b.Fatal(err)
			}
		}
	})
}
