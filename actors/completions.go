package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
)

// completionConsumer is the durable consumer that tells parents of their
// children's ends.
const completionConsumer = "cairn_finished"

// completionConsumerConfig is its configuration.
func completionConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        completionConsumer,
		FilterSubjects: []string{events.AllCompletions, events.AllEnded},
		AckPolicy:      jetstream.AckExplicitPolicy,
		// A member that stops (or is paused) holds the completions it
		// pulled until they are redelivered: keep that short.
		AckWait:       10 * time.Second,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// Bounds of the completion consumer's upkeep.
const (
	// consumerOpTimeout bounds one creation or look-up of the consumer.
	consumerOpTimeout = 5 * time.Second
	// consumerCheck is how often the consumer is looked at when nothing
	// reported a problem.
	consumerCheck = 30 * time.Second
	// consumerRetryMax caps the backoff between tries to open it again.
	consumerRetryMax = 10 * time.Second
	// pullExpiry and pullHeartbeat are those of Consume's pull requests. A
	// pull request lives on the consumer's leader only: when that server
	// dies (kill -9 of a node with its embedded server, in a cluster),
	// the request dies with it and nothing is delivered until Consume
	// misses two heartbeats and pulls again. nats.go's defaults (30s
	// expiry, 15s heartbeat) made that a 30s stall of every parent's
	// wake; these make it 4s, for a pull request and a heartbeat every
	// few seconds per node.
	pullExpiry    = 10 * time.Second
	pullHeartbeat = 2 * time.Second
)

// completions delivers completions, cancellations and failures to parents
// through the durable consumer, for as long as the node runs. nats.go's
// Consume pulls again by itself after a reconnect (a server restart), but
// it stops for good when the consumer is deleted, and keeps pulling from
// one that no longer exists (a server that lost it) without a word but an
// error to its handler: either way no parent would be woken again. So the
// consumer is looked after: when Consume reports such an error, and every
// consumerCheck, the consumer is looked up, and created and consumed again
// (backing off while NATS is out) when it is gone or Consume stopped. A
// consumer created again delivers every completion of the log again: each
// is a no-op for a parent that had it (it wakes, reads its children, parks
// or finds itself ended).
type completions struct {
	n      *Node
	stream jetstream.Stream
	// poke asks the upkeep loop to look at the consumer now.
	poke chan struct{}
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
}

// startConsumer starts delivering completions: a message is acknowledged
// only after the parent's actor accepted it, so a crash in between
// redelivers it.
func (n *Node) startConsumer(ctx context.Context, stream jetstream.Stream) error {
	// Completions are handled concurrently (each is a run-record read, a
	// write to the active set and a message to the parent, and belongs to
	// a run of its own), bounded; the callback blocks when all slots are
	// busy, so the consumer's pending acknowledgements stay bounded too.
	n.finishing = make(chan struct{}, finishConcurrency)
	c := &completions{n: n, stream: stream, poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.open(ctx); err != nil {
		return err
	}
	n.consume = c
	go c.upkeep()
	return nil
}

// open creates (or finds) the consumer and consumes it, replacing what was
// consumed before.
func (c *completions) open(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, consumerOpTimeout)
	defer cancel()
	cons, err := c.stream.CreateOrUpdateConsumer(cctx, completionConsumerConfig())
	if err != nil {
		return fmt.Errorf("actors: completion consumer: %w", err)
	}
	cc, err := cons.Consume(c.n.deliver, jetstream.ConsumeErrHandler(c.onError),
		jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(pullHeartbeat))
	if err != nil {
		return fmt.Errorf("actors: completion consumer: %w", err)
	}
	c.mu.Lock()
	old := c.cc
	c.cons, c.cc = cons, cc
	c.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	return nil
}

// onError is Consume's error handler: an error that may mean the consumer
// is gone has it looked at now. Errors of an outage (a missed heartbeat
// while reconnecting) are left to nats.go, which pulls again once
// connected; the look-up then finds the consumer there.
func (c *completions) onError(_ jetstream.ConsumeContext, err error) {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrBadRequest) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoHeartbeat) {
		select {
		case c.poke <- struct{}{}:
		default:
		}
	}
}

// upkeep looks at the consumer when poked and every consumerCheck, and
// opens it again while it is gone.
func (c *completions) upkeep() {
	defer close(c.done)
	t := c.n.cfg.Waits.NewTicker(consumerCheck)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.poke:
		case <-t.C():
		}
		for delay := 100 * time.Millisecond; c.gone(); delay = min(2*delay, consumerRetryMax) {
			err := c.open(context.Background())
			if err == nil {
				c.n.logger.Info("actors: completion consumer opened again")
				break
			}
			c.n.logger.Warn("actors: completion consumer is gone; opening it again", "in", delay, "err", err)
			wait := c.n.cfg.Waits.NewTimer(delay)
			select {
			case <-c.stop:
				wait.Stop()
				return
			case <-wait.C():
			}
		}
	}
}

// gone reports whether the consumer must be opened again: Consume stopped
// (it does on a deleted consumer), or the server says the consumer does
// not exist. A look-up that fails otherwise (NATS out) says nothing: the
// next poke or check looks again.
func (c *completions) gone() bool {
	c.mu.Lock()
	cons, cc := c.cons, c.cc
	c.mu.Unlock()
	select {
	case <-cc.Closed():
		return true
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), consumerOpTimeout)
	defer cancel()
	_, err := cons.Info(ctx)
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

// Stop stops delivering completions: those pulled and not yet handled are
// redelivered to whoever runs next.
func (c *completions) Stop() {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	cc := c.cc
	c.mu.Unlock()
	cc.Stop()
	// Stop unsubscribes in the background: wait for it (bounded: a
	// connection that is down may never confirm), so a closed node leaves
	// no subscription on a connection its owner goes on using.
	t := c.n.cfg.Waits.NewTimer(consumerOpTimeout)
	defer t.Stop()
	select {
	case <-cc.Closed():
	case <-t.C():
		c.n.logger.Warn("actors: the completion consumer did not confirm its stop")
	}
}

// deliver is the consumer's callback: each completion handled off the
// callback, at most finishConcurrency at once.
func (n *Node) deliver(msg jetstream.Msg) {
	n.finishing <- struct{}{}
	n.mu.Lock()
	if n.finStopped { // shutting down: redelivered to whoever runs next
		n.mu.Unlock()
		<-n.finishing
		return
	}
	n.handlers.Add(1)
	n.mu.Unlock()
	go func() {
		defer func() {
			<-n.finishing
			n.handlers.Done()
		}()
		n.finished(msg)
	}()
}
