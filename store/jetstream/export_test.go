package jetstream

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// PublishFunc is the signature of the store's publish path.
type PublishFunc = func(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error)

// WrapPublish replaces the store's publish path with wrap(original).
func WrapPublish(s *Store, wrap func(PublishFunc) PublishFunc) { s.publishMsg = wrap(s.publishMsg) }

// BatchRequestFunc is the signature of the committer's batch commit.
type BatchRequestFunc = func(ctx context.Context, msg *nats.Msg) (*nats.Msg, error)

// WrapBatchRequest replaces the committer's batch commit with wrap(original).
func WrapBatchRequest(s *Store, wrap func(BatchRequestFunc) BatchRequestFunc) {
	s.batchRequest = wrap(s.batchRequest)
}

// WrapLogPublish replaces a Log's single-publish path with wrap(original).
func WrapLogPublish(w *Log, wrap func(PublishFunc) PublishFunc) {
	w.publishMsg = wrap(w.publishMsg)
}

// WrapLogBatchRequest replaces a Log's batch commit with wrap(original).
func WrapLogBatchRequest(w *Log, wrap func(BatchRequestFunc) BatchRequestFunc) {
	w.batchRequest = wrap(w.batchRequest)
}

// ForgetUsedCallIDsBase makes a handle's next revision list every used
// call ID, as every revision did before listings had a base.
func ForgetUsedCallIDsBase(h *RunStore) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.base = listing{}
}

// ScanTo scans filter from the start as Scan does, with end, the leader's
// last matching sequence when the scan began, given.
func ScanTo(ctx context.Context, w *Log, filter string, end uint64) (seen []uint64, err error) {
	err = w.scanFrom(ctx, filter, 1, end, true, func(m *rawMsg) error {
		seen = append(seen, m.seq)
		return nil
	})
	return seen, err
}

// EnsureStream is ensureStream on the stream Config describes.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.Stream, error) {
	if cfg.Stream == "" {
		cfg.Stream = events.DefaultStream
	}
	cfg.Replicas = max(cfg.Replicas, 1)
	return ensureStream(ctx, js, streamConfig(cfg))
}

// StorageFault is storageFault.
var StorageFault = storageFault
