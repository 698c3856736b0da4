package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// replies receives the answers of requests answered by more than one
// message (batched and multi-last direct gets) on one wildcard
// subscription per Log, the way nats.go's Request shares one for
// single answers. A subscription per request would cost a SUB and an UNSUB
// each, and on the server an update of its subject cache at both.
type replies struct {
	nc *nats.Conn

	once   sync.Once
	err    error
	prefix string
	sub    *nats.Subscription

	mu      sync.Mutex
	next    uint64
	waiting map[string]*inbox
	closed  bool
}

// inbox queues one request's answers: the shared handler appends without
// ever blocking (a reader that gave up must not stall the others'
// answers); answers after close are dropped.
type inbox struct {
	mu     sync.Mutex
	msgs   []*nats.Msg
	signal chan struct{} // one pending wake-up
}

// open registers a request: its reply subject, its inbox, and a func that
// unregisters it.
func (r *replies) open() (subject string, in *inbox, closeFn func(), err error) {
	r.once.Do(func() {
		r.waiting = map[string]*inbox{}
		r.prefix = r.nc.NewRespInbox() + "."
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			r.err = ErrClosed
			return
		}
		r.sub, r.err = r.nc.Subscribe(r.prefix+"*", r.deliver)
	})
	if r.err != nil {
		return "", nil, nil, fmt.Errorf("reply subscription: %w", r.err)
	}
	in = &inbox{signal: make(chan struct{}, 1)}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return "", nil, nil, fmt.Errorf("reply subscription: %w", ErrClosed)
	}
	r.next++
	token := strconv.FormatUint(r.next, 36)
	r.waiting[token] = in
	r.mu.Unlock()
	return r.prefix + token, in, func() {
		r.mu.Lock()
		delete(r.waiting, token)
		r.mu.Unlock()
	}, nil
}

// close removes the subscription; requests opened after it fail, and
// answers still on their way to one open before are dropped.
func (r *replies) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	if r.sub == nil {
		return nil
	}
	if err := r.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		return fmt.Errorf("reply subscription: %w", err)
	}
	return nil
}

func (r *replies) deliver(m *nats.Msg) {
	token := m.Subject[len(r.prefix):]
	r.mu.Lock()
	in := r.waiting[token]
	r.mu.Unlock()
	if in == nil {
		return
	}
	in.mu.Lock()
	in.msgs = append(in.msgs, m)
	in.mu.Unlock()
	select {
	case in.signal <- struct{}{}:
	default:
	}
}

// receive waits for the next answer, at most opTimeout (or the context's
// deadline).
func (in *inbox) receive(ctx context.Context) (*nats.Msg, error) {
	var t *time.Timer
	for {
		in.mu.Lock()
		if len(in.msgs) > 0 {
			m := in.msgs[0]
			in.msgs[0] = nil
			in.msgs = in.msgs[1:]
			in.mu.Unlock()
			return m, nil
		}
		in.mu.Unlock()
		if t == nil {
			wait := opTimeout
			if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
				wait = time.Until(d)
			}
			t = time.NewTimer(wait)
			defer t.Stop()
		}
		select {
		case <-in.signal:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, nats.ErrTimeout
		}
	}
}
