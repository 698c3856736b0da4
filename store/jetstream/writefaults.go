package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"
)

// WriteFaults follows whether JetStream stores what a node writes, stream
// by stream: the last write to a stream that failed to be stored, until a
// later write to that stream is. A Store records the outcome of every
// publish of its Logs (its own and LogOn's) here, and an embedded Server
// given the same WriteFaults records the write errors of its streams'
// stores (a full disk) the moment they happen, before any publisher
// hears of them. A node's readiness reads Last. The zero value is ready
// to use; its methods are safe for concurrent use and do nothing on a nil
// *WriteFaults.
type WriteFaults struct {
	// held counts the streams with a fault: a write that succeeds while
	// none is held costs one atomic load, and allocates nothing.
	held atomic.Int32
	seq  atomic.Uint64

	mu       sync.Mutex
	byStream map[string]*WriteFault
}

// WriteFault is a stream's last write that failed to be stored.
type WriteFault struct {
	// Stream is the stream written to.
	Stream string
	// Err is why: the server's answer (insufficient resources, a store
	// that failed), the store's own error (ENOSPC, EIO) as the embedded
	// server reported it, or a publish that got no answer.
	Err error
	// Seq orders the failures of a WriteFaults: a later failure, or a
	// later write to the stream that met an outage while the fault held,
	// has a larger Seq. It starts at 1.
	Seq uint64
}

// Error says which stream failed to store a write, and why.
func (f *WriteFault) Error() string {
	return fmt.Sprintf("JetStream failed to store a write to stream %s: %v", f.Stream, f.Err)
}

// Unwrap is the cause.
func (f *WriteFault) Unwrap() error { return f.Err }

// Last returns the most recent fault of a stream none of whose writes has
// been stored since, leaving out the streams named in except (a prober's
// own, whose writes decide it anyway); nil when there is none.
func (f *WriteFaults) Last(except ...string) *WriteFault {
	if f == nil || f.held.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var last *WriteFault
	for _, w := range f.byStream {
		if (last == nil || w.Seq > last.Seq) && !slices.Contains(except, w.Stream) {
			last = w
		}
	}
	return last
}

// stored records that a write to stream was stored: its fault, if any, is
// over. This is the commit path's cost when nothing failed: one atomic
// load.
func (f *WriteFaults) stored(stream string) {
	if f == nil || f.held.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byStream[stream]; ok {
		delete(f.byStream, stream)
		f.held.Store(int32(len(f.byStream)))
	}
}

// publishFailed records a publish to stream that failed with err.
// unanswered says the publish got no answer in its time while the
// connection stayed up: a single server whose store met a write error
// answers no publish to the stream again (nats-server 2.15), and so does
// a stream without a leader. A storage error is a fault. An unanswered
// publish, or any outage (Unavailable), of a stream whose fault holds
// renews it with its cause (the embedded server's ENOSPC says more than
// the silence that follows it); an unanswered publish of a stream with no
// fault is one. Other errors (a conflict, a message too large) say
// nothing of the stream's storage.
func (f *WriteFaults) publishFailed(stream string, err error, unanswered bool) {
	if f == nil || err == nil {
		return
	}
	switch {
	case storageFault(err):
		f.failed(stream, err)
	case (unanswered || Unavailable(err)) && f.renewed(stream):
	case unanswered:
		f.failed(stream, fmt.Errorf("a publish got no answer in %s while NATS was connected: %w", opTimeout, err))
	}
}

// renewed gives stream's fault, if one holds, a new Seq and the same
// cause, and reports whether one held.
func (f *WriteFaults) renewed(stream string) bool {
	if f.held.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w, ok := f.byStream[stream]
	if ok {
		f.byStream[stream] = &WriteFault{Stream: stream, Err: w.Err, Seq: f.seq.Add(1)}
	}
	return ok
}

// failed records that stream failed to store a write, for err.
func (f *WriteFaults) failed(stream string, err error) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byStream == nil {
		f.byStream = map[string]*WriteFault{}
	}
	f.byStream[stream] = &WriteFault{Stream: stream, Err: err, Seq: f.seq.Add(1)}
	f.held.Store(int32(len(f.byStream)))
}

// storageFault reports an error that says the stream's storage refused a
// write: a store's own error (no space, an I/O error, a quota, a
// read-only file system), or the JetStream API's answers of the same
// (insufficient resources, storage or memory resources exceeded, a store
// that failed, JetStream turned off, which a server does on a write error
// in a cluster), except for a message too large for the stream, which is
// the write's own fault.
func storageFault(err error) bool {
	for _, e := range []error{syscall.ENOSPC, syscall.EIO, syscall.EDQUOT, syscall.EROFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode {
	case codeInsufficientResources, codeMemoryResourcesExceeded, codeStorageExceeded, codeNotEnabled, codeNotEnabledForAccount:
		return true
	case codeStoreFailed:
		return !strings.Contains(api.Description, "message size exceeds maximum")
	}
	return false
}

// unanswered reports a try that ended on its own deadline with no answer
// while ctx, the caller's, lasts: the server did not answer in time,
// rather than the caller giving up.
func unanswered(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}
