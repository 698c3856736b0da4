package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/schema"
)

// External capabilities are NATS request/reply services (nats.go micro).
// A service offers capabilities when its metadata has cairn=capabilities;
// each endpoint is one capability named <service>.<endpoint>, described by
// its endpoint metadata:
//
//	description   what it does (shown to the model)
//	input_schema  a JSON Schema (through the gate; a rejected schema stops
//	              the node with the service, endpoint and keyword named)
//	effect        read-only, idempotent or effectful (default effectful)
//
// Arguments are sent as the request body; the reply body is the result;
// a micro error (Nats-Service-Error header) is the capability's error.
const serviceMarker = "capabilities"

// external is a discovered capability and the subject that serves it.
type external struct {
	capability runtime.Capability
	subject    string
}

// discover asks every micro service for its info and keeps the endpoints
// of services that offer capabilities.
func discover(ctx context.Context, nc *nats.Conn, wait time.Duration) (map[string]external, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.INFO", inbox, nil); err != nil {
		return nil, err
	}
	out := map[string]external{}
	deadline := time.Now().Add(wait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break // the wait is over: every service that answers in time is in
		}
		var info micro.Info
		if json.Unmarshal(m.Data, &info) != nil || info.Metadata["cairn"] != serviceMarker {
			continue
		}
		for _, ep := range info.Endpoints {
			name := info.Name + "." + ep.Name
			where := fmt.Sprintf("service %s endpoint %s", info.Name, ep.Name)
			raw := ep.Metadata["input_schema"]
			if raw == "" {
				return nil, fmt.Errorf("capabilities: %s: metadata input_schema is required", where)
			}
			if _, err := schema.Compile([]byte(raw)); err != nil {
				return nil, fmt.Errorf("capabilities: %s: input_schema: %w", where, err)
			}
			effect := ep.Metadata["effect"]
			switch effect {
			case "":
				effect = runtime.EffectEffectful
			case runtime.EffectReadOnly, runtime.EffectIdempotent, runtime.EffectEffectful:
			default:
				return nil, fmt.Errorf("capabilities: %s: effect %q is not read-only, idempotent or effectful", where, effect)
			}
			if prev, dup := out[name]; dup && prev.subject != ep.Subject {
				return nil, fmt.Errorf("capabilities: %s is served on two subjects (%s, %s)", name, prev.subject, ep.Subject)
			}
			out[name] = external{subject: ep.Subject, capability: runtime.Capability{Name: name, Description: ep.Metadata["description"], InputSchema: json.RawMessage(raw), Effect: effect}}
		}
	}
	return out, ctx.Err()
}

func catalog(builtin []runtime.Capability, ext map[string]external) ([]runtime.Capability, error) {
	out := append([]runtime.Capability(nil), builtin...)
	names := make([]string, 0, len(ext))
	for n := range ext {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, b := range builtin {
			if b.Name == n || strings.HasPrefix(n, b.Name+".") || strings.HasPrefix(b.Name, n+".") {
				return nil, fmt.Errorf("capabilities: %s collides with the built-in %s", n, b.Name)
			}
		}
		out = append(out, ext[n].capability)
	}
	return out, nil
}

// routed sends each capability to the built-in store or to its service.
type routed struct {
	builtin runtime.Backend
	nc      *nats.Conn
	ext     map[string]external
}

func backends(kvFor func(events.Run) runtime.Backend, nc *nats.Conn, ext map[string]external) func(events.Run) runtime.Backend {
	return func(r events.Run) runtime.Backend { return routed{builtin: kvFor(r), nc: nc, ext: ext} }
}

// Bounds of a call to a capability service.
const (
	// serviceCallTimeout bounds one call, its sends again included: two
	// thirds of run_js's time limit (jsexec.DefaultTimeout, 30 s), so that
	// a call that meets an outage longer than the call fails in the
	// script, which may catch it, rather than the script ending on its own
	// limit with the call still waiting (before, the call's bound was the
	// script's own, and the script always went first).
	serviceCallTimeout = 20 * time.Second
	// serviceBackoffMax caps the wait before a request is sent again
	// after no service answered it (a service still reconnecting).
	serviceBackoffMax = time.Second
)

// errOutcomeUnknown: the connection to NATS dropped while an effectful
// call was in flight; the service may or may not have acted on it.
var errOutcomeUnknown = errors.New("the connection to NATS dropped while the call was in flight: whether the service acted on it is unknown, so an effectful call is not sent again")

func (b routed) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	e, ok := b.ext[inv.Capability]
	if !ok {
		return b.builtin.Invoke(ctx, inv)
	}
	ctx, cancel := context.WithTimeout(ctx, serviceCallTimeout)
	defer cancel()
	msg := nats.NewMsg(e.subject)
	msg.Data = inv.Args
	msg.Header.Set("Cairn-Script-Call", inv.ScriptCallID)
	msg.Header.Set("Cairn-Seq", fmt.Sprint(inv.Seq))
	reply, err := serviceRequest(ctx, b.nc, msg, e.capability.Effect != runtime.EffectEffectful)
	if err != nil {
		return jstool.Value{}, fmt.Errorf("service %s: %w", e.subject, err)
	}
	if desc := reply.Header.Get(micro.ErrorHeader); desc != "" {
		return jstool.Value{}, fmt.Errorf("%s (code %s)", desc, reply.Header.Get(micro.ErrorCodeHeader))
	}
	if !json.Valid(reply.Data) {
		return jstool.Value{}, fmt.Errorf("service %s answered with a body that is not JSON", e.subject)
	}
	return jstool.Value{JSON: reply.Data}, nil
}

// serviceRequest sends msg and waits for its reply until ctx ends,
// through short outages of NATS. A request no service answered (none
// listens yet: a service reconnecting after a restart) was never
// delivered, and is sent again after a backoff. A request in flight when
// the connection dropped may be lost, or its reply: when again is true (a
// read-only or idempotent capability, which a second delivery does not
// harm; its headers Cairn-Script-Call and Cairn-Seq stay the same) it is
// sent again, into nats.go's buffer while it reconnects, and else the call
// fails with errOutcomeUnknown. A reply that is only slow is waited for.
func serviceRequest(ctx context.Context, nc *nats.Conn, msg *nats.Msg, again bool) (*nats.Msg, error) {
	delay := 50 * time.Millisecond
	for {
		reply, dropped, err := serviceRequestOnce(ctx, nc, msg)
		switch {
		case err == nil:
			return reply, nil
		case ctx.Err() != nil:
			return nil, err
		case dropped && !again:
			return nil, errOutcomeUnknown
		case dropped:
			continue
		case errors.Is(err, nats.ErrNoResponders):
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
			delay = min(2*delay, serviceBackoffMax)
		default:
			return nil, err
		}
	}
}

// serviceRequestOnce sends msg once and waits for its reply, until ctx
// ends or the connection drops (dropped) while it waits.
func serviceRequestOnce(ctx context.Context, nc *nats.Conn, msg *nats.Msg) (reply *nats.Msg, dropped bool, err error) {
	drops := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED)
	defer nc.RemoveStatusListener(drops)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost atomic.Bool
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case _, ok := <-drops:
			if ok {
				lost.Store(true)
				cancel()
			}
		case <-rctx.Done():
		}
	}()
	reply, err = nc.RequestMsgWithContext(rctx, msg)
	cancel()
	<-watched
	if err != nil && lost.Load() {
		return nil, true, err
	}
	return reply, false, err
}
