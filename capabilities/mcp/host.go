package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
)

// Options are what a Host needs besides its Config.
type Options struct {
	// Logger receives the servers' stderr and their restarts; nil discards.
	Logger *slog.Logger
	// Blobs stores attachments (images, audio, embedded resources); nil
	// makes a result with one an error.
	Blobs BlobStore
	// Redactor redacts stderr lines before they are logged and text
	// resources before they are stored; nil redacts nothing.
	Redactor runtime.Redactor
	// StartTimeout bounds connecting to a server and listing its tools;
	// zero means 30s.
	StartTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a reconnect (a
	// stdio restart), doubling from Min to Max; zero means 200ms and 30s.
	MinBackoff, MaxBackoff time.Duration

	// listed, for tests, is called after every relisting of a server.
	listed func(server string)
}

// Host is the node's MCP client side: one supervised connection per
// configured server, the capabilities bound from their allowed tools, and
// the Backend that calls them.
type Host struct {
	opts    Options
	servers []*server
	byCap   map[string]binding
	caps    []runtime.Capability
	grants  map[string][]string // agent -> capability names
	allowed map[string]map[string]bool

	closeOnce sync.Once
}

// binding is an allowed tool bound as a capability.
type binding struct {
	srv         *server
	tool        string
	schema      json.RawMessage
	annotations *sdk.ToolAnnotations
	description string
	capability  runtime.Capability
}

// Start connects to every server, lists its tools and binds each allowed
// one as the capability <server>.<tool> (a tool name that is not a
// JavaScript identifier has every other character replaced by "_":
// get-tiny-image is caps.everything.get_tiny_image). Any failure (a server
// that does not start, an allowed tool it does not offer, an input schema
// the gate refuses, two tools with one capability name) stops Start with an
// error naming the server and the tool; nothing is left running. ctx bounds
// the start only: the servers run until Close.
func Start(ctx context.Context, cfg *Config, opts Options) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Redactor == nil {
		opts.Redactor = runtime.Secrets(nil)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	h := &Host{opts: opts, byCap: map[string]binding{}, grants: map[string][]string{}, allowed: map[string]map[string]bool{}}
	for _, sc := range cfg.Servers {
		s := newServer(sc, &h.opts)
		sctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
		bindings, err := s.start(sctx)
		cancel()
		if err != nil {
			_ = h.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		h.servers = append(h.servers, s)
		for _, b := range bindings {
			name := sc.Name + "." + jsName(b.tool)
			if other, dup := h.byCap[name]; dup {
				_ = h.Close(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("mcp: server %s: tools %q and %q are both capability %s", sc.Name, other.tool, b.tool, name)
			}
			b.capability = runtime.Capability{Name: name, Description: b.description + resultShape,
				InputSchema: b.schema, Effect: effectOf(b.annotations, sc.Effects[b.tool])}
			h.byCap[name] = b
			h.caps = append(h.caps, b.capability)
			for _, agent := range sc.Agents {
				if h.allowed[agent] == nil {
					h.allowed[agent] = map[string]bool{}
				}
				if !h.allowed[agent][name] {
					h.allowed[agent][name] = true
					h.grants[agent] = append(h.grants[agent], name)
				}
			}
		}
		sup, stop := context.WithCancel(context.Background())
		s.stop, s.done = stop, make(chan struct{})
		go s.supervise(sup)
	}
	sort.Slice(h.caps, func(i, j int) bool { return h.caps[i].Name < h.caps[j].Name })
	for _, g := range h.grants {
		sort.Strings(g)
	}
	return h, nil
}

var notIdent = regexp.MustCompile(`[^A-Za-z0-9_$]`)

// jsName maps an MCP tool name to a JavaScript identifier.
func jsName(tool string) string {
	n := notIdent.ReplaceAllString(tool, "_")
	if n == "" || (n[0] >= '0' && n[0] <= '9') {
		n = "_" + n
	}
	return n
}

// Capabilities returns the bound capabilities, sorted by name.
func (h *Host) Capabilities() []runtime.Capability {
	return append([]runtime.Capability(nil), h.caps...)
}

// Grants returns, for each agent slug named in the configuration, the
// capability names it may call, sorted. The host adds them to the agent's
// definition (C4: the catalog is host-authorized).
func (h *Host) Grants() map[string][]string {
	out := make(map[string][]string, len(h.grants))
	for a, g := range h.grants {
		out[a] = append([]string(nil), g...)
	}
	return out
}

// Backend returns the Backend of one run of agent: it calls the MCP
// capabilities the configuration grants that agent, checking the grant on
// every call (C10: nothing in the invocation establishes authority), and
// hands every other capability to next (nil: they fail as unknown).
func (h *Host) Backend(agent string, next runtime.Backend) runtime.Backend {
	return &backend{h: h, agent: agent, next: next}
}

// ErrNotGranted: the run's agent may not call this MCP capability.
var ErrNotGranted = errors.New("mcp: capability not granted to this agent")

type backend struct {
	h     *Host
	agent string
	next  runtime.Backend
}

func (b *backend) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	bd, ok := b.h.byCap[inv.Capability]
	if !ok {
		if b.next == nil {
			return jstool.Value{}, fmt.Errorf("%w: %q", jstool.ErrUnknownCapability, inv.Capability)
		}
		return b.next.Invoke(ctx, inv)
	}
	if !b.h.allowed[b.agent][inv.Capability] {
		return jstool.Value{}, fmt.Errorf("%w: agent %q may not call %s", ErrNotGranted, b.agent, inv.Capability)
	}
	res, err := bd.srv.call(ctx, bd.tool, inv.Args)
	if err == nil {
		var v jstool.Value
		v, err = convertResult(ctx, res, b.h.opts.Blobs, b.h.opts.Redactor)
		if err == nil {
			// The canonical invoker redacts with the run's redactor; this
			// one also knows the servers' own secrets (their headers, say).
			v.JSON = redactJSON(b.h.opts.Redactor, v.JSON)
			return v, nil
		}
	}
	return jstool.Value{}, &redactedError{msg: b.h.opts.Redactor.Redact(err.Error()), err: err}
}

// redactJSON redacts JSON text; a redaction that breaks the JSON yields the
// redacted text as a JSON string, never the original.
func redactJSON(r runtime.Redactor, js json.RawMessage) json.RawMessage {
	red := r.Redact(string(js))
	if red == string(js) {
		return js
	}
	if !json.Valid([]byte(red)) {
		b, _ := json.Marshal(red)
		return b
	}
	return json.RawMessage(red)
}

// redactedError keeps the error's identity (errors.Is) with redacted text.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Close stops every server (a stdio server's stdin is closed, then it is
// terminated) and waits for their supervisors, or for ctx: then it returns
// ctx's error while the servers finish stopping in the background. A
// second Close returns nil at once.
func (h *Host) Close(ctx context.Context) error {
	if h == nil {
		return nil
	}
	var err error
	h.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, s := range h.servers {
			wg.Add(1)
			go func() { defer wg.Done(); s.close() }()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("mcp: close: servers still stopping: %w", ctx.Err())
		}
	})
	return err
}

// server returns the named server, for tests.
func (h *Host) server(name string) *server {
	for _, s := range h.servers {
		if s.cfg.Name == name {
			return s
		}
	}
	return nil
}
