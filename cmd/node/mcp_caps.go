package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	njs "github.com/nats-io/nats.go/jetstream"

	mcpcaps "github.com/cairn-agents/cairn/capabilities/mcp"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/redact"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// withMCP starts the MCP servers of the --mcp-servers file (none when the
// flag is empty), adds their tools to the catalog, grants each to the
// agents the file names (adding them to those agents' definitions), and
// routes their calls; every other capability goes to next. The returned
// host is nil without MCP servers (Close is nil-safe).
func withMCP(ctx context.Context, o nodeOptions, dep *deployment, js njs.JetStream, catalog []runtime.Capability,
	next func(events.Run) runtime.Backend) (*mcpcaps.Host, []runtime.Capability, func(events.Run) runtime.Backend, error) {
	if o.mcpServers == "" {
		return nil, catalog, next, nil
	}
	cfg, err := mcpcaps.LoadConfig(o.mcpServers)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, s := range cfg.Servers {
		for j, slug := range s.Agents {
			if _, ok := dep.agents[slug]; !ok {
				return nil, nil, nil, fmt.Errorf("mcp config %s: servers[%d].agents[%d]: no agent %q in %s", o.mcpServers, i, j, slug, dep.dir)
			}
		}
	}
	blobs, err := newObjectBlobs(ctx, js)
	if err != nil {
		return nil, nil, nil, err
	}
	logger := o.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	host, err := mcpcaps.Start(ctx, cfg, mcpcaps.Options{Logger: logger, Blobs: blobs, Redactor: mcpRedactor(o)})
	if err != nil {
		return nil, nil, nil, err
	}
	out := append([]runtime.Capability(nil), catalog...)
	mine := map[string]bool{}
	for _, c := range host.Capabilities() {
		for _, b := range catalog {
			if b.Name == c.Name || strings.HasPrefix(c.Name, b.Name+".") || strings.HasPrefix(b.Name, c.Name+".") {
				_ = host.Close(context.WithoutCancel(ctx))
				return nil, nil, nil, fmt.Errorf("mcp: capability %s collides with %s", c.Name, b.Name)
			}
		}
		out = append(out, c)
		mine[c.Name] = true
	}
	grants := host.Grants()
	// C4/C10: an agent gets an MCP tool only from the configuration; a
	// definition that names one it was not granted is refused.
	for slug, a := range dep.agents {
		for i, c := range a.agent.Definition.Capabilities {
			if mine[c] && !slices.Contains(grants[slug], c) {
				_ = host.Close(context.WithoutCancel(ctx))
				return nil, nil, nil, &fileError{File: a.file, Field: fmt.Sprintf("capabilities[%d]", i),
					Reason: fmt.Sprintf("%s is an MCP tool that %s does not grant to agent %q", c, o.mcpServers, slug)}
			}
		}
		for _, c := range grants[slug] {
			if !slices.Contains(a.agent.Definition.Capabilities, c) {
				a.agent.Definition.Capabilities = append(a.agent.Definition.Capabilities, c)
			}
		}
	}
	route := func(r events.Run) runtime.Backend { return host.Backend(r.Agent, next(r)) }
	return host, out, route, nil
}

// mcpRedactor is the MCP host's redactor: the node's (nodeSecrets), for
// the servers' stderr and results before the run's redactor sees them.
// nodeRedactor warns of what it refuses; this one does not again.
func mcpRedactor(o nodeOptions) *redact.Set {
	cands, _ := nodeSecrets(o)
	s, _ := runtime.NewSecrets(cands)
	return s.Compile()
}

// objectBlobs keeps MCP attachments in a JetStream object store, content
// addressed: the reference is nats-object://<bucket>/<sha256>.
type objectBlobs struct {
	os njs.ObjectStore
}

const attachmentBucket = "CAIRN_ATTACHMENTS"

func newObjectBlobs(ctx context.Context, js njs.JetStream) (*objectBlobs, error) {
	var os njs.ObjectStore
	err := cjs.Setup(ctx, func(ctx context.Context) (err error) {
		os, err = js.CreateOrUpdateObjectStore(ctx, njs.ObjectStoreConfig{Bucket: attachmentBucket, Storage: njs.FileStorage})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", attachmentBucket, err)
	}
	return &objectBlobs{os: os}, nil
}

func (b *objectBlobs) Put(ctx context.Context, data []byte, mediaType string) (string, error) {
	sum := sha256.Sum256(data)
	key := hex.EncodeToString(sum[:])
	ref := "nats-object://" + attachmentBucket + "/" + key
	if _, err := b.os.GetInfo(ctx, key); err == nil {
		return ref, nil
	} else if !errors.Is(err, njs.ErrObjectNotFound) {
		return "", err
	}
	meta := njs.ObjectMeta{Name: key, Headers: map[string][]string{"Content-Type": {mediaType}}}
	if _, err := b.os.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		return "", err
	}
	return ref, nil
}
