package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
	"github.com/cairn-agents/cairn/store/jetstream/natstest"
)

// kvLog makes a KV bucket (the way the node makes its buckets) and a
// Log on its stream.
func kvLog(t *testing.T, nc *nats.Conn, bucket string, cfg jetstream.LogConfig) (njs.KeyValue, *jetstream.Log) {
	t.Helper()
	ctx := context.Background()
	js, _ := njs.New(nc)
	kv, err := js.CreateOrUpdateKeyValue(ctx, njs.KeyValueConfig{Bucket: bucket, Storage: njs.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Stream = "KV_" + bucket
	w, err := jetstream.NewLog(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kv, w
}

func kvMsg(bucket, key, value string) *nats.Msg {
	return &nats.Msg{Subject: "$KV." + bucket + "." + key, Data: []byte(value)}
}

func streamMsgs(t *testing.T, nc *nats.Conn, stream, subject string) uint64 {
	t.Helper()
	js, _ := njs.New(nc)
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), njs.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// stored is the number of messages ever stored in stream (its last
// sequence: a KV bucket keeps only each key's last).
func stored(t *testing.T, nc *nats.Conn, stream string) uint64 {
	t.Helper()
	js, _ := njs.New(nc)
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

func TestLogRefusesBadInput(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  jetstream.LogConfig
		want string
	}{
		{jetstream.LogConfig{}, "LogConfig.Stream: empty"},
		{jetstream.LogConfig{Stream: "NOPE"}, "stream NOPE"},
		{jetstream.LogConfig{Stream: "NOPE", Retries: -1}, "must not be negative"},
		{jetstream.LogConfig{Stream: "NOPE", GroupCommit: jetstream.GroupCommit{MaxBatch: 5000}}, "GroupCommit.MaxBatch"},
	} {
		if _, err := jetstream.NewLog(ctx, nc, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := jetstream.NewLog(ctx, nil, jetstream.LogConfig{Stream: "X"}); err == nil {
		t.Error("nil connection accepted")
	}
	_, w := kvLog(t, nc, "bad", jetstream.LogConfig{})
	for _, tc := range []struct {
		msg       *nats.Msg
		id, fence string
		expect    uint64
		want      string
	}{
		{nil, "a", "", 0, "nil message"},
		{&nats.Msg{}, "a", "", 0, "subject is empty"},
		{kvMsg("bad", "k", "v"), "", "", 0, "id is empty"},
		{kvMsg("bad", "k", "v"), "a", "", 3, "expect 3 without a fence subject"},
	} {
		if _, err := w.Write(ctx, tc.msg, tc.id, tc.fence, tc.expect); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%q, %q, %d): err = %v, want %q", tc.id, tc.fence, tc.expect, err, tc.want)
		}
	}
	if n := stored(t, nc, "KV_bad"); n != 0 {
		t.Errorf("refused writes stored %d messages", n)
	}
}

// A Log on a KV bucket's stream speaks the bucket's compare-and-set: a
// write fenced on the key's subject at revision r is an Update at r; at 0
// it is a Create. Stale fences are conflicts; a repeated write is stored
// once. In every commit mode.
func TestLogCompareAndSet(t *testing.T) {
	for _, m := range commitModes {
		t.Run(m.name, func(t *testing.T) {
			nc := natstest.Connect(t, natstest.Server(t))
			kv, w := kvLog(t, nc, "cas", jetstream.LogConfig{GroupCommit: m.gc})
			ctx := context.Background()
			subj := "$KV.cas.k"
			seq, err := w.Write(ctx, kvMsg("cas", "k", "one"), "w1", subj, 0)
			if err != nil {
				t.Fatal(err)
			}
			e, err := kv.Get(ctx, "k")
			if err != nil || string(e.Value()) != "one" || e.Revision() != seq {
				t.Fatalf("after create: %v (rev %d, want %d), %v", e, e.Revision(), seq, err)
			}
			if _, err := w.Write(ctx, kvMsg("cas", "k", "again"), "w2", subj, 0); !errors.Is(err, runtime.ErrConflict) {
				t.Errorf("second create: %v, want a conflict", err)
			}
			seq2, err := w.Write(ctx, kvMsg("cas", "k", "two"), "w3", subj, seq)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(ctx, kvMsg("cas", "k", "stale"), "w4", subj, seq); !errors.Is(err, runtime.ErrConflict) {
				t.Errorf("stale update: %v, want a conflict", err)
			}
			// The same write again (a caller's retry): its own sequence, not a conflict.
			if again, err := w.Write(ctx, kvMsg("cas", "k", "two"), "w3", subj, seq); err != nil || again != seq2 {
				t.Errorf("repeated write: seq %d, %v; want %d", again, err, seq2)
			}
			// Unfenced (a Put), and its repetition is stored once.
			if _, err := w.Write(ctx, kvMsg("cas", "p", "x"), "p1", "", 0); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(ctx, kvMsg("cas", "p", "x"), "p1", "", 0); err != nil {
				t.Fatal(err)
			}
			if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "two" {
				t.Errorf("value %v, %v; want two", e, err)
			}
			if n := stored(t, nc, "KV_cas"); n != 3 {
				t.Errorf("%d messages stored, want 3", n)
			}
		})
	}
}

// A lost acknowledgement of a single publish, fenced or not: the write was
// stored, the caller is told its sequence, nothing is stored twice.
func TestLogLostAcknowledgement(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	kv, w := kvLog(t, nc, "lost", jetstream.LogConfig{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
	var calls atomic.Int64
	jetstream.WrapLogPublish(w, func(next jetstream.PublishFunc) jetstream.PublishFunc {
		return func(ctx context.Context, msg *nats.Msg) (*njs.PubAck, error) {
			if calls.Add(1)%2 == 1 { // every first try is stored, its answer lost
				if _, err := next(ctx, msg); err != nil {
					return nil, err
				}
				return nil, nats.ErrTimeout
			}
			return next(ctx, msg)
		}
	})
	ctx := context.Background()
	seq, err := w.Write(ctx, kvMsg("lost", "k", "one"), "c1", "$KV.lost.k", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, kvMsg("lost", "k", "two"), "c2", "$KV.lost.k", seq); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, kvMsg("lost", "p", "x"), "p1", "", 0); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "two" {
		t.Errorf("value %v, %v; want two", e, err)
	}
	if n := stored(t, nc, "KV_lost"); n != 3 {
		t.Errorf("%d messages stored, want 3", n)
	}
}

// Many writers of one counter key each (the ledger's pattern: read, then
// compare-and-set, again on a conflict) with a stale writer in every
// batch: exactly the stale writer is refused, every increment lands once,
// batches both committed and fell back, and a batch's lost answer is
// settled by each caller.
func TestLogBatchesWithStaleWriterAndLostAnswers(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	var ok, failed atomic.Int64
	kv, w := kvLog(t, nc, "ctr", jetstream.LogConfig{
		GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitBatch, MaxInflight: 1, MaxBatch: 64},
		OnBatch: func(ev jetstream.BatchEvent) {
			if ev.Err != nil {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
		},
	})
	var n atomic.Int64
	jetstream.WrapLogBatchRequest(w, func(next jetstream.BatchRequestFunc) jetstream.BatchRequestFunc {
		return func(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
			reply, err := next(ctx, msg)
			if n.Add(1)%5 == 0 && err == nil { // stored, answer lost
				return nil, nats.ErrTimeout
			}
			return reply, err
		}
	})
	ctx := context.Background()
	staleSeq, err := w.Write(ctx, kvMsg("ctr", "stale", "0"), "stale-0", "$KV.ctr.stale", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, kvMsg("ctr", "stale", "1"), "stale-1", "$KV.ctr.stale", staleSeq); err != nil {
		t.Fatal(err)
	}
	const writers, incs = 24, 10
	var done atomic.Bool
	errs := make(chan error, writers+1)
	var stale sync.WaitGroup
	stale.Add(1)
	go func() {
		defer stale.Done()
		for i := 0; !done.Load(); i++ {
			_, err := w.Write(ctx, kvMsg("ctr", "stale", "x"), fmt.Sprintf("stale-x-%d", i), "$KV.ctr.stale", staleSeq)
			if !errors.Is(err, runtime.ErrConflict) {
				errs <- fmt.Errorf("stale writer: %v, want a conflict", err)
				return
			}
		}
	}()
	var good sync.WaitGroup
	for g := 0; g < writers; g++ {
		good.Add(1)
		go func(g int) {
			defer good.Done()
			key := fmt.Sprintf("c%d", g)
			var rev uint64
			for i := 1; i <= incs; i++ {
				seq, err := w.Write(ctx, kvMsg("ctr", key, fmt.Sprint(i)), fmt.Sprintf("%s-%d", key, i), "$KV.ctr."+key, rev)
				if err != nil {
					errs <- fmt.Errorf("writer %d inc %d: %w", g, i, err)
					return
				}
				rev = seq
			}
		}(g)
	}
	good.Wait()
	done.Store(true)
	stale.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for g := 0; g < writers; g++ {
		key := fmt.Sprintf("c%d", g)
		if e, err := kv.Get(ctx, key); err != nil || string(e.Value()) != fmt.Sprint(incs) {
			t.Errorf("%s: %v, %v; want %d", key, e, err, incs)
		}
		if c := streamMsgs(t, nc, "KV_ctr", "$KV.ctr."+key); c != 1 { // history 1: the last one kept
			t.Errorf("%s: %d messages kept", key, c)
		}
	}
	if n := stored(t, nc, "KV_ctr"); n != 2+writers*incs {
		t.Errorf("%d messages stored, want %d: a write was lost or stored twice", n, 2+writers*incs)
	}
	if e, err := kv.Get(ctx, "stale"); err != nil || string(e.Value()) != "1" {
		t.Errorf("stale key: %v, %v; the stale writer got in", e, err)
	}
	if ok.Load() == 0 || failed.Load() == 0 {
		t.Errorf("batches: %d committed, %d failed; the test did not exercise both paths", ok.Load(), failed.Load())
	}
}

// A Log in a mode that batches switches atomic publish on for its
// stream; in single mode it leaves the stream alone.
func TestLogEnablesAtomicPublish(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	js, _ := njs.New(nc)
	ctx := context.Background()
	kvLog(t, nc, "single", jetstream.LogConfig{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
	kvLog(t, nc, "adaptive", jetstream.LogConfig{})
	for stream, want := range map[string]bool{"KV_single": false, "KV_adaptive": true} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.AllowAtomicPublish; got != want {
			t.Errorf("%s: allow_atomic %v, want %v", stream, got, want)
		}
	}
}

// Adaptive mode on a busy node: a group below MinBatch waits (up to
// Linger) for company instead of going out one by one, and a group that
// finds none is published one by one when Linger expires.
func TestLogLingerGathersSmallGroups(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	var sizes []int
	var mu sync.Mutex
	gc := jetstream.GroupCommit{Mode: jetstream.CommitAdaptive, Threshold: 1, MinBatch: 4, Linger: time.Second}
	kv, w := kvLog(t, nc, "linger", jetstream.LogConfig{GroupCommit: gc, OnBatch: func(ev jetstream.BatchEvent) {
		mu.Lock()
		sizes = append(sizes, ev.Size)
		mu.Unlock()
	}})
	ctx := context.Background()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			if _, err := w.Write(ctx, kvMsg("linger", fmt.Sprint("k", i), "v"), fmt.Sprint("g", i), "", 0); err != nil {
				t.Error(err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	mu.Lock()
	// One batch of 4 is what happens; a scheduler that delays a goroutine
	// by over a second splits it, but any batch at all shows the wait
	// (without Linger the first write goes out alone at once, and the
	// rest follow it one by one or in a group below MinBatch).
	if len(sizes) == 0 || sizes[0] < 2 {
		t.Errorf("batches %v, want one of 4: the first writes did not wait for company", sizes)
	}
	mu.Unlock()

	// Alone: published on its own once Linger expires, no batch.
	_, w2 := kvLog(t, nc, "alone", jetstream.LogConfig{GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitAdaptive, Threshold: 1, MinBatch: 4, Linger: 50 * time.Millisecond},
		OnBatch: func(ev jetstream.BatchEvent) { t.Errorf("a lone write went out in a batch of %d", ev.Size) }})
	if _, err := w2.Write(ctx, kvMsg("alone", "k", "v"), "lone", "$KV.alone.k", 0); err != nil {
		t.Fatal(err)
	}
	if n := stored(t, nc, "KV_alone"); n != 1 {
		t.Errorf("%d stored, want 1", n)
	}
	if n := stored(t, nc, "KV_linger"); n != 4 {
		t.Errorf("%d stored, want 4", n)
	}
	_ = kv
}

// Scan reads every message of a filter, in order, without a consumer.
func TestLogScan(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	_, w := kvLog(t, nc, "scan", jetstream.LogConfig{})
	ctx := context.Background()
	for i := 0; i < 1200; i++ { // more than one batched direct get
		key := fmt.Sprintf("r1.k%04d", i)
		if i%2 == 1 {
			key = fmt.Sprintf("r2.k%04d", i)
		}
		if _, err := w.Write(ctx, kvMsg("scan", key, fmt.Sprint(i)), "s"+key, "", 0); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var last uint64
	err := w.Scan(ctx, "$KV.scan.r1.>", func(subject string, seq uint64, _ nats.Header, data []byte) error {
		if seq <= last {
			t.Errorf("seq %d after %d", seq, last)
		}
		last = seq
		got = append(got, string(data))
		return nil
	})
	if err != nil || len(got) != 600 || got[0] != "0" || got[599] != "1198" {
		t.Fatalf("%d messages (%v...), %v; want 600 from 0 to 1198", len(got), got[:min(len(got), 3)], err)
	}
	if err := w.Scan(ctx, "$KV.scan.none.>", func(string, uint64, nats.Header, []byte) error { t.Error("a message on an empty filter"); return nil }); err != nil {
		t.Fatal(err)
	}
	cons, _ := njs.New(nc)
	st, _ := cons.Stream(ctx, "KV_scan")
	if info, err := st.Info(ctx); err != nil || info.State.Consumers != 0 {
		t.Errorf("consumers %d, %v; want none", info.State.Consumers, err)
	}
}

// Lasts answers each filter as Last does, from one request on a single
// replica (and from a read per filter when the server cannot answer in
// one: more subjects than a multi-last get returns), and refuses a bad
// filter by its index.
func TestLogLasts(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	_, w := kvLog(t, nc, "lasts", jetstream.LogConfig{})
	ctx := context.Background()
	n := 0
	put := func(key, value string) {
		t.Helper()
		n++
		if _, err := w.Write(ctx, kvMsg("lasts", key, value), fmt.Sprint("l", n), "", 0); err != nil {
			t.Fatal(err)
		}
	}
	put("r1.a", "a1")
	put("r1.b", "b1")
	put("r1.a", "a2")
	put("r2.a", "other")
	for i := 0; i < 1100; i++ { // more subjects than one multi-last answer holds
		put(fmt.Sprintf("many.k%04d", i), fmt.Sprint(i))
	}
	put("r1.c", "c1")
	check := func(filters ...string) {
		t.Helper()
		got, err := w.Lasts(ctx, filters...)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(filters) {
			t.Fatalf("%d answers for %d filters", len(got), len(filters))
		}
		for i, f := range filters {
			want, err := w.Last(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case want == nil && got[i] == nil:
			case want == nil || got[i] == nil:
				t.Errorf("%s: Lasts %v, Last %v", f, got[i], want)
			case want.Sequence != got[i].Sequence || want.Subject != got[i].Subject || string(want.Data) != string(got[i].Data) || !want.Time.Equal(got[i].Time):
				t.Errorf("%s: Lasts %s #%d %q %s, Last %s #%d %q %s", f, got[i].Subject, got[i].Sequence, got[i].Data, got[i].Time, want.Subject, want.Sequence, want.Data, want.Time)
			}
		}
	}
	check("$KV.lasts.r1.a", "$KV.lasts.r1.>", "$KV.lasts.*.a", "$KV.lasts.none", "$KV.lasts.r1.b")
	check("$KV.lasts.none.>")
	check("$KV.lasts.many.>", "$KV.lasts.r1.a") // 1,100 subjects: read filter by filter
	check("$KV.lasts.>")
	if got, err := w.Lasts(ctx); err != nil || got != nil {
		t.Fatalf("no filters: %v, %v", got, err)
	}
	for _, bad := range []string{"", "a..b", "a.>.b", "a.b*", "a b"} {
		if _, err := w.Lasts(ctx, "$KV.lasts.r1.a", bad); err == nil || !strings.Contains(err.Error(), "filters[1]") {
			t.Errorf("filter %q: %v, want an error naming filters[1]", bad, err)
		}
	}
}

// A replicated stream is read filter by filter from its leader, with the
// same answers.
func TestLogLastsReplicated(t *testing.T) {
	srvs := natstest.Cluster(t, 3)
	nc := natstest.Connect(t, srvs[0])
	ctx := context.Background()
	js, _ := njs.New(nc)
	if _, err := js.CreateOrUpdateKeyValue(ctx, njs.KeyValueConfig{Bucket: "lastsr", Storage: njs.FileStorage, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	w, err := jetstream.NewLog(ctx, nc, jetstream.LogConfig{Stream: "KV_lastsr", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, kv := range [][2]string{{"r1.a", "a1"}, {"r1.b", "b1"}, {"r1.a", "a2"}} {
		if _, err := w.Write(ctx, kvMsg("lastsr", kv[0], kv[1]), fmt.Sprint("l", i), "", 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.Lasts(ctx, "$KV.lastsr.r1.>", "$KV.lastsr.r1.b", "$KV.lastsr.none")
	if err != nil || string(got[0].Data) != "a2" || string(got[1].Data) != "b1" || got[2] != nil {
		t.Fatalf("Lasts: %v, %v", got, err)
	}
}

// Concurrent multi-message reads on one Log share one reply
// subscription and never get each other's answers; a read that gave up
// (its context ended) stalls nobody.
func TestLogRepliesShared(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	_, w := kvLog(t, nc, "mux", jetstream.LogConfig{})
	ctx := context.Background()
	for i := 0; i < 40; i++ {
		key := fmt.Sprintf("r%d.k%d", i%8, i)
		if _, err := w.Write(ctx, kvMsg("mux", key, key), "m"+key, "", 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Lasts(ctx, "$KV.mux.r0.>"); err != nil { // the shared subscription is made once
		t.Fatal(err)
	}
	subs := nc.NumSubscriptions()
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Lasts(gone, "$KV.mux.r1.>"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read with an ended context: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			run := fmt.Sprintf("r%d", g%8)
			for i := 0; i < 20; i++ {
				if i%2 == 0 {
					got, err := w.Lasts(ctx, "$KV.mux."+run+".>")
					if err != nil || got[0] == nil || !strings.HasPrefix(string(got[0].Data), run+".") {
						errs <- fmt.Errorf("Lasts %s: %v, %v", run, got, err)
						return
					}
					continue
				}
				n := 0
				err := w.Scan(ctx, "$KV.mux."+run+".>", func(subject string, _ uint64, _ nats.Header, data []byte) error {
					if !strings.HasPrefix(string(data), run+".") {
						return fmt.Errorf("scan of %s got %s", run, data)
					}
					n++
					return nil
				})
				if err != nil || n != 5 {
					errs <- fmt.Errorf("Scan %s: %d messages, %v", run, n, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := nc.NumSubscriptions(); got != subs {
		t.Errorf("%d subscriptions after the reads, %d before", got, subs)
	}
}

// On a bucket that keeps one revision per key, a key written again while
// a Scan runs loses the revision the scan had not reached; its new one is
// past the scan's starting end, and Scan still returns it, so a listing
// built on Scan never misses a key that existed throughout.
func TestLogScanSeesKeysRewrittenDuringTheScan(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	kv, w := kvLog(t, nc, "rescan", jetstream.LogConfig{})
	ctx := context.Background()
	for i := 0; i < 600; i++ { // more than one batch of the scan
		key := fmt.Sprintf("k%03d", i)
		if _, err := w.Write(ctx, kvMsg("rescan", key, "old"), "w"+key, "", 0); err != nil {
			t.Fatal(err)
		}
	}
	values := map[string]string{}
	rewritten := false
	err := w.Scan(ctx, "$KV.rescan.>", func(subject string, _ uint64, _ nats.Header, data []byte) error {
		if !rewritten { // while the first batch is read: k550's old revision, in the second, goes
			rewritten = true
			if _, err := kv.Put(ctx, "k550", []byte("new")); err != nil {
				return err
			}
		}
		values[strings.TrimPrefix(subject, "$KV.rescan.")] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(values) != 600 || values["k550"] != "new" {
		t.Fatalf("%d keys, k550 = %q; want 600 keys and k550's new value", len(values), values["k550"])
	}
}

// A replicated scan waits for a lagging follower to reach the leader's last
// message as the scan began, unless that message is gone meanwhile (a KV
// purge marker that expired, a deleted message): then it ends at what the
// leader has, instead of failing once its retries run out, which lost a
// sweep of the active set every time a finished run's marker expired.
func TestLogScanReplicatedEndGone(t *testing.T) {
	srvs := natstest.Cluster(t, 3)
	nc := natstest.Connect(t, srvs[0])
	ctx := context.Background()
	js, _ := njs.New(nc)
	st, err := js.CreateStream(ctx, njs.StreamConfig{Name: "GONE", Subjects: []string{"gone.>"}, Replicas: 3, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	w, err := jetstream.NewLog(ctx, nc, jetstream.LogConfig{Stream: "GONE", Replicas: 3, GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range []string{"a", "b", "c"} {
		if _, err := w.Write(ctx, &nats.Msg{Subject: "gone." + s, Data: []byte(s)}, fmt.Sprint("g", i), "", 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeleteMsg(ctx, 3); err != nil { // the scan's end, gone
		t.Fatal(err)
	}
	seen, err := jetstream.ScanTo(ctx, w, "gone.>", 3)
	if err != nil || fmt.Sprint(seen) != "[1 2]" {
		t.Fatalf("scan to a deleted end: %v, %v; want [1 2]", seen, err)
	}
}

// On a replicated stream the leader acknowledges a fenced write before it
// forgets that the fence's subject is "in process", and refuses a fenced
// write that comes in between with "wrong last sequence" although the
// fence holds (nats-server 2.12+, jetstream_batching.go). One writer
// writing one subject back to back must never see that as a conflict: the
// log has not moved on. (Before, it did, once in some thousands of writes:
// TestConformanceR3 failed in CI with "session ... moved on (expected last
// sequence 274)" for a session nobody else wrote.)
func TestLogFenceHeldIsNoConflictReplicated(t *testing.T) {
	srvs := natstest.Cluster(t, 3)
	ctx := context.Background()
	js, _ := njs.New(natstest.Connect(t, srvs[0]))
	if _, err := js.CreateOrUpdateKeyValue(ctx, njs.KeyValueConfig{Bucket: "fenced", Storage: njs.FileStorage, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, srv := range srvs { // a writer on every server: one of them is on the leader
		w, err := jetstream.NewLog(ctx, natstest.Connect(t, srv), jetstream.LogConfig{Stream: "KV_fenced", Replicas: 3, GroupCommit: jetstream.GroupCommit{Mode: jetstream.CommitSingle}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("k", i)
			subject := "$KV.fenced." + key
			var last uint64
			for n := range 1500 {
				seq, err := w.Write(ctx, kvMsg("fenced", key, fmt.Sprint(n)), fmt.Sprintf("%s.%d", key, n), subject, last)
				if err != nil {
					t.Errorf("write %d of %s, the only writer of its key: %v", n, key, err)
					return
				}
				last = seq
			}
		}()
	}
	wg.Wait()
}

// Close removes the Log's reply subscription (each Log had one for
// good, and a process that made Logs kept them all), and a Log or
// Store used after Close says so.
func TestLogClose(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	ctx := context.Background()
	_, w := kvLog(t, nc, "closing", jetstream.LogConfig{})
	if _, err := w.Write(ctx, kvMsg("closing", "a", "1"), "a1", "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Lasts(ctx, "$KV.closing.a"); err != nil { // opens the reply subscription
		t.Fatal(err)
	}
	before := nc.NumSubscriptions()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nc.NumSubscriptions(); got != before-1 {
		t.Fatalf("subscriptions after Close: %d, want %d", got, before-1)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := w.Write(ctx, kvMsg("closing", "a", "2"), "a2", "", 0); !errors.Is(err, jetstream.ErrClosed) {
		t.Fatalf("write after Close: %v, want ErrClosed", err)
	}
	if _, err := w.Lasts(ctx, "$KV.closing.a"); !errors.Is(err, jetstream.ErrClosed) {
		t.Fatalf("Lasts after Close: %v, want ErrClosed", err)
	}
	if _, err := w.Last(ctx, "$KV.closing.a"); !errors.Is(err, jetstream.ErrClosed) {
		t.Fatalf("Last after Close: %v, want ErrClosed", err)
	}

	s := newStore(t, nc, jetstream.Config{})
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, "s", "r"); !errors.Is(err, jetstream.ErrClosed) {
		t.Fatalf("Open after the Store's Close: %v, want ErrClosed", err)
	}
}
