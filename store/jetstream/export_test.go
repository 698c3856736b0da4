package jetstream

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishFunc is the signature of the store's publish path.
type PublishFunc = func(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)

// WrapPublish replaces the store's publish path with wrap(original).
func WrapPublish(s *Store, wrap func(PublishFunc) PublishFunc) { s.publishMsg = wrap(s.publishMsg) }
