package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
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

func (b routed) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	e, ok := b.ext[inv.Capability]
	if !ok {
		return b.builtin.Invoke(ctx, inv)
	}
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	msg := nats.NewMsg(e.subject)
	msg.Data = inv.Args
	msg.Header.Set("Cairn-Script-Call", inv.ScriptCallID)
	msg.Header.Set("Cairn-Seq", fmt.Sprint(inv.Seq))
	reply, err := b.nc.RequestMsgWithContext(ctx, msg)
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
