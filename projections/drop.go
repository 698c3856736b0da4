package projections

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// Drop deletes a projection's saved state and durable consumer, so that its
// next Start rebuilds it from sequence 1. Dropping what does not exist is
// not an error.
func Drop(ctx context.Context, cfg Config, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if cfg.JS == nil {
		return fmt.Errorf("%w: JS is required", ErrConfig)
	}
	if cfg.Stream == "" {
		cfg.Stream = events.DefaultStream
	}
	st, err := cfg.JS.Stream(ctx, cfg.Stream)
	if err != nil {
		return fmt.Errorf("projections: drop %s: %w", name, err)
	}
	if err := deleteConsumers(ctx, st, name); err != nil {
		return err
	}
	if cfg.StateBucket == "" {
		return nil
	}
	obs, err := cfg.JS.ObjectStore(ctx, cfg.StateBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("projections: drop %s: %w", name, err)
	}
	if err := obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("projections: drop %s: state: %w", name, err)
	}
	return nil
}
