package jetstream

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// opTimeout bounds each request to NATS the store makes (a publish, a
// read, one answer of a batched read), whatever deadline the caller's
// context has: a request sent just before the server went away is never
// answered, and an attempt's context may last as long as its run's
// wall-clock budget. nats.go bounds a request only when the context has
// no deadline at all.
const opTimeout = 5 * time.Second

// blobTimeout bounds one object-store transfer (an out-of-line payload,
// several chunks).
const blobTimeout = 30 * time.Second

// Unavailable reports whether err says that NATS or JetStream cannot serve
// the request now for a reason that passes by itself or when an operator
// acts: the connection is down, reconnecting or closed; a request timed
// out or found no responder (no JetStream server, no stream leader); the
// store refused a write for lack of room (a full disk, a stream at its
// limits). Such an error says nothing about the request: whoever meets one
// waits and tries again, however long the outage lasts. It is false for a
// conflict (a wrong last sequence: another writer got in first) and for
// errors of the request itself (a message too large, a malformed subject,
// a missing stream), which no wait fixes.
//
// The JetStream API codes taken as an outage (nats-server's errors.json):
// 10008 JetStream system temporarily unavailable; 10023 insufficient
// resources (the server's storage limit reached); 10028 and 10047
// insufficient memory or storage resources; 10039 and 10076 JetStream not
// enabled (for the account), which is what a server answers after it
// turned JetStream off on a write error; 10077 the stream failed to store
// the message (maximum bytes or messages exceeded: a full stream), except
// for a message too large for the stream; 10163 a new stream leader still
// applying its log.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return unavailableAPI(api)
	}
	for _, target := range outages {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// outages are the client-side errors of an outage.
var outages = []error{
	nats.ErrTimeout, context.DeadlineExceeded, nats.ErrNoResponders,
	nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrNoServers,
	nats.ErrStaleConnection, nats.ErrReconnectBufExceeded,
	jetstream.ErrNoStreamResponse, jetstream.ErrServerShutdown, jetstream.ErrNoHeartbeat, jetstream.ErrAsyncPublishTimeout,
	errReplicaBehind,
}

// Codes of JetStream API errors (nats-server's errors.json).
const (
	codeClusterNotAvailable     = 10008
	codeInsufficientResources   = 10023
	codeMemoryResourcesExceeded = 10028
	codeNotEnabledForAccount    = 10039
	codeStorageExceeded         = 10047
	codeNotEnabled              = 10076
	codeStoreFailed             = 10077
	codeLeaderNotReady          = 10163
)

func unavailableAPI(api *jetstream.APIError) bool {
	switch api.ErrorCode {
	case codeClusterNotAvailable, codeInsufficientResources, codeMemoryResourcesExceeded, codeNotEnabledForAccount,
		codeStorageExceeded, codeNotEnabled, codeLeaderNotReady:
		return true
	case codeStoreFailed:
		// The server puts the store's own error in the description; a
		// message larger than the stream allows is the request's fault
		// (server.ErrMsgTooLarge), every other failure to store is a lack
		// of room or a failing disk.
		return !strings.Contains(api.Description, "message size exceeds maximum")
	}
	return false
}

// errReplicaBehind: a read answered by a stream replica that stays behind
// its leader.
var errReplicaBehind = errors.New("jetstream: the replica answering is behind the stream leader")

// notEnabled reports a server's answer that JetStream is not enabled.
func notEnabled(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.As(err, &api) && (api.ErrorCode == codeNotEnabled || api.ErrorCode == codeNotEnabledForAccount)
}

// setupTry bounds one try of a set-up request. A JetStream API request
// sent while the cluster had no leader is never answered: one try that
// waited for it to its caller's deadline (20 s when a member rejoins) kept
// the member out of the cluster, pulling completions it could only put
// back, for 20 s after the cluster had recovered (a parent woke 4 s late,
// long after every fault's recovery).
const setupTry = 2 * time.Second

// setupTotal bounds Setup when its context has no deadline: its caller
// then hears of an outage that lasts, and logs it (a node's start tries
// again; a rejoin too).
const setupTotal = 30 * time.Second

// Setup runs f, a request that sets up what a component needs of
// JetStream: idempotent, such as a stream, a KV bucket or an object store
// looked up or created. It is Retry with tries of setupTry, bounded in all
// by setupTotal when ctx has no deadline.
func Setup(ctx context.Context, f func(ctx context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, setupTotal)
		defer cancel()
	}
	return Retry(ctx, setupTry, f)
}

// Retry runs f, an idempotent request (a set-up, a read, a write of the
// same value again), until it succeeds, fails for a reason other than an
// outage (Unavailable), or ctx ends. Each try is bounded by try: a request
// sent just before the server went away is never answered, and is sent
// again, through the reconnect, once try has passed, rather than waited
// for until ctx ends. Between tries it backs off from 100 ms, doubling up
// to a second. A server that says JetStream is not enabled is answered at
// once: at set-up that is most often a server without JetStream, and
// later one that turned it off on a write error; no wait fixes either.
// Its error is f's last.
func Retry(ctx context.Context, try time.Duration, f func(ctx context.Context) error) error {
	delay := 100 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, try)
		err := f(tctx)
		cancel()
		if err == nil || !Unavailable(err) || notEnabled(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}
