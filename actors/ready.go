package actors

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// readyBucket holds the readiness probes' writes: a key per probe, each
// gone after readyProbeTTL (the bucket's MaxAge), on as many replicas as
// the log, so that a probe lands where the log's writes would.
const readyBucket = "cairn_ready"

// Readiness bounds.
const (
	readyProbeTTL = time.Minute
	// probeTimeout bounds one probe write: a disk that answers nothing (a
	// full one, on a single server) must not hold the caller.
	probeTimeout = 2 * time.Second
	// probeReuse is how long a probe's answer stands for the callers that
	// come after it: a /readyz polled often, or every start of a run,
	// costs one write (an fsync) a second at most.
	probeReuse = time.Second
	// faultHold is how long a write that JetStream failed to store keeps
	// the node not ready when no write to its stream has been stored
	// since, nor failed again: then the probe decides. Under load the
	// writes that fail renew the fault well within it (each try of a
	// publish that goes unanswered fails in 5 s); an idle node whose
	// writes failed (a start refused, nothing retrying) would otherwise
	// wait for a write to that stream that only readiness lets in.
	faultHold = 10 * time.Second
)

// readiness is the node's record of its last probe.
type readiness struct {
	w   *kvBucket // nil until Start opened the bucket
	seq atomic.Uint64

	mu     sync.Mutex // one probe at a time; the others reuse its answer
	at     time.Time
	ok     bool
	reason string

	// The write fault Ready last saw (cjs.WriteFault's Seq) and when it
	// first saw it, on the Waits clock.
	fmu       sync.Mutex
	faultSeq  uint64
	faultSeen time.Time
}

// openReadiness creates the probe bucket and its writer (through the
// store's, so a probe goes the way of the node's other writes).
func (n *Node) openReadiness(ctx context.Context, js jetstream.JetStream, replicas int) error {
	cctx, cancel := context.WithTimeout(ctx, consumerOpTimeout)
	defer cancel()
	if err := cjs.Setup(cctx, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: readyBucket, Storage: jetstream.FileStorage,
			Replicas: replicas, TTL: readyProbeTTL})
		return err
	}); err != nil {
		return fmt.Errorf("actors: bucket %s: %w", readyBucket, err)
	}
	w, err := n.store.LogOn(ctx, "KV_"+readyBucket)
	if err != nil {
		return fmt.Errorf("actors: bucket %s: %w", readyBucket, err)
	}
	n.closers = append(n.closers, w.Close)
	n.ready.w = newKVBucket(w, readyBucket)
	return nil
}

// Ready reports whether the node can take work and commit it now, and
// when it cannot, why: NATS is connected, this member is in its cluster's
// topology and its membership is current, its active set has read the
// log as it stood at the start (so its first sweep can resume the runs it
// owns), none of the streams it writes has failed to store its last
// write (the store's WriteFaults: a full disk, a full stream, a publish
// left unanswered; see writeFault), and a probe write lands (a key of its
// own in a bucket replicated as the log, expiring). A JetStream that
// refuses writes (a full disk or stream, no stream leader, JetStream
// turned off) fails the probe too; but a disk with room for the probe's
// few bytes and none for the log's writes, or a store that failed on the
// log's stream alone, lets it land, and only the writes that failed tell.
// The probe is bounded by probeTimeout, and its answer stands for
// probeReuse.
func (n *Node) Ready(ctx context.Context) (bool, string) {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return false, "the node is closing"
	}
	if st := n.cfg.Conn.Status(); st != nats.CONNECTED {
		return false, "NATS is not connected (" + st.String() + ")"
	}
	m := n.current()
	if m == nil || n.ready.w == nil {
		return false, "the node is starting"
	}
	if !m.isCurrent() {
		return false, "this member's membership is not current (paused or cut off past its TTL); it is joining again"
	}
	m.mu.Lock()
	_, in := m.members[m.id]
	m.mu.Unlock()
	if !in {
		return false, "this member is not in the cluster's topology yet"
	}
	if why, reading := n.actives.reading(); reading {
		return false, why // its first sweep, which resumes the runs it owns, waits for it
	}
	if why, held := n.writeFault(); held {
		return false, why
	}
	return n.probe(ctx, m.id)
}

// writeFault reports the store's last write fault (a stream none of whose
// writes has been stored since one failed): from the failed write on,
// at once, and until a write to that stream is stored, or for faultHold
// after Ready first saw its latest failure, when the probe decides again.
// The probe bucket's own faults are the probe's to report: its next write
// that lands ends them.
func (n *Node) writeFault() (string, bool) {
	f := n.store.WriteFaults().Last("KV_" + readyBucket)
	if f == nil {
		return "", false
	}
	r := &n.ready
	now := n.cfg.Waits.Now()
	r.fmu.Lock()
	defer r.fmu.Unlock()
	if f.Seq != r.faultSeq {
		r.faultSeq, r.faultSeen = f.Seq, now
	}
	if now.Sub(r.faultSeen) >= faultHold {
		return "", false
	}
	return f.Error() + " (ready again once a write to " + f.Stream + " is stored)", true
}

// serverNow is the time on JetStream's clock: the time stored with a key
// this member writes to the probe bucket (expiring), read back from the
// stream leader. Times stored with messages are the server's; comparing
// one with this node's clock would take in their skew.
func (n *Node) serverNow(ctx context.Context) (time.Time, error) {
	r := &n.ready
	if r.w == nil {
		return time.Time{}, errors.New("actors: the probe bucket is not open")
	}
	key := "clock." + keyOf(n.current().id)
	if _, err := r.w.put(ctx, key, nil); err != nil {
		return time.Time{}, err
	}
	m, err := r.w.w.Last(ctx, r.w.subject(key))
	if err != nil {
		return time.Time{}, err
	}
	if m == nil {
		return time.Time{}, fmt.Errorf("actors: the clock probe %s is not in the probe bucket after its write", key)
	}
	return m.Time, nil
}

// probe writes a key of its own to the probe bucket, or returns the answer
// of a probe made less than probeReuse ago.
func (n *Node) probe(ctx context.Context, member string) (bool, string) {
	r := &n.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && n.cfg.Waits.Now().Sub(r.at) < probeReuse {
		return r.ok, r.reason
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	key := keyOf(member) + "." + strconv.FormatUint(r.seq.Add(1), 36)
	_, err := r.w.put(ctx, key, []byte(n.cfg.Waits.Now().UTC().Format(time.RFC3339Nano)))
	r.at, r.ok, r.reason = n.cfg.Waits.Now(), err == nil, ""
	if err != nil {
		r.reason = "a probe write to JetStream failed: " + err.Error()
	}
	return r.ok, r.reason
}
