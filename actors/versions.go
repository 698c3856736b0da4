package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors/definition"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// definitionsBucket holds every definition version a run was admitted
// under, by content address (actors/definition): written once per version
// by the first member that deploys it, read by any member that resumes a
// run of it. Replicated as the log is.
const definitionsBucket = "cairn_definitions"

// ErrUnknownVersion: a run's record names a definition version that is in
// no member's storage (a record written by hand, or a bucket restored
// without it).
// It matches ErrNotFound.
var ErrUnknownVersion = fmt.Errorf("%w: unknown definition version", ErrNotFound)

// versions are the definitions this node runs runs under: the current
// deployment's, one version per deployed agent, and every version a run
// this node resumed was pinned to, loaded on first need. Versions never
// change (they are content addressed), so what is loaded stays.
type versions struct {
	w *kvBucket
	// kv reads the bucket's entries with their times (PruneVersions).
	kv   jetstream.KeyValue
	keys *events.Keyring
	// build makes an agent's model (Config.Model).
	build func(Agent) (model.Model, error)
	// current is the deployment's version of each agent, by slug.
	current map[string]string

	mu   sync.Mutex
	byID map[string]definition.Version
	// models are the models built, by the digest of their agent: every
	// version that holds an agent unchanged shares its model.
	models map[string]model.Model
	// contracts are contract hashes computed, by version and agent.
	contracts map[string]string
}

// newVersions pins every deployed agent and builds its model: a model
// that cannot be built fails the start, as before pinning.
func newVersions(agents map[string]*Agent, catalog map[string]runtime.Capability, build func(Agent) (model.Model, error)) (*versions, error) {
	v := &versions{build: build, current: map[string]string{}, byID: map[string]definition.Version{}, models: map[string]model.Model{},
		contracts: map[string]string{}}
	all := make(map[string]Agent, len(agents))
	for slug, a := range agents {
		all[slug] = *a
	}
	for slug := range agents {
		ver, err := definition.Pin(slug, all, catalog)
		if err != nil {
			return nil, fmt.Errorf("actors: agent %q: %w", slug, err)
		}
		id, err := definition.ID(ver)
		if err != nil {
			return nil, err
		}
		v.current[slug] = id
		v.byID[id] = ver
		if _, err := v.model(ver, slug); err != nil {
			return nil, fmt.Errorf("actors: agent %q: model: %w", slug, err)
		}
	}
	return v, nil
}

// publish stores the current versions, each once: a version another
// member (or an earlier start) stored already is left as it is.
func (v *versions) publish(ctx context.Context) error {
	for slug, id := range v.current {
		b, err := definition.Encode(v.byID[id])
		if err != nil {
			return err
		}
		if err := v.store(ctx, id, b); err != nil {
			return fmt.Errorf("actors: store the definition of %q: %w", slug, err)
		}
	}
	return nil
}

// store writes the encoded version id unless the bucket holds it: over
// nothing, or over the marker a prune left (the same definition deployed
// again, a rollback say), fenced on what it read; a member that stored it
// meanwhile wins, and its copy is the same version.
func (v *versions) store(ctx context.Context, id string, encoded []byte) error {
	for range 3 {
		_, rev, found, err := v.w.get(ctx, id)
		if err != nil || found {
			return err
		}
		if rev == 0 {
			_, err = v.w.create(ctx, id, v.keys.Seal(encoded))
		} else {
			_, err = v.w.update(ctx, id, v.keys.Seal(encoded), rev)
		}
		if !errors.Is(err, runtime.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("definition version %s: written over three times while storing it", definition.Short(id))
}

// read loads version id from the bucket (found false when it has none).
func (v *versions) read(ctx context.Context, id string) (definition.Version, bool, error) {
	raw, _, found, err := v.w.get(ctx, id)
	if err != nil || !found {
		return definition.Version{}, false, err
	}
	b, err := v.keys.Open(raw)
	if err != nil {
		return definition.Version{}, false, fmt.Errorf("definition version %s: %w", definition.Short(id), err)
	}
	ver, err := definition.Decode(id, b)
	if err != nil {
		return definition.Version{}, false, err
	}
	return ver, true, nil
}

// get is version id, from memory or the bucket. A version in neither is
// ErrUnknownVersion.
func (v *versions) get(ctx context.Context, id string) (definition.Version, error) {
	v.mu.Lock()
	ver, ok := v.byID[id]
	v.mu.Unlock()
	if ok {
		return ver, nil
	}
	if err := definition.ValidID(id); err != nil {
		return definition.Version{}, fmt.Errorf("%w: %v", ErrUnknownVersion, err)
	}
	ver, found, err := v.read(ctx, id)
	if err != nil {
		return definition.Version{}, err
	}
	if !found {
		return definition.Version{}, fmt.Errorf("%w: %s is in no member's storage", ErrUnknownVersion, definition.Short(id))
	}
	v.mu.Lock()
	v.byID[id] = ver
	v.mu.Unlock()
	return ver, nil
}

// child is the version a child of agent slug is created under by a run
// pinned to parent: the closure from slug as parent pinned it
// (definition.Version.Sub), stored first if no member stored it yet (a
// child of an earlier deploy's run whose closure no deploy since had).
// A slug parent does not hold is a rejection the model sees.
func (v *versions) child(ctx context.Context, parent, slug string) (string, error) {
	ver, err := v.get(ctx, parent)
	if err != nil {
		return "", err
	}
	if _, ok := ver.Agents[slug]; !ok {
		return "", reject("agent %q is not a subagent of this run's definition", slug)
	}
	sub, err := ver.Sub(slug)
	if err != nil {
		return "", err
	}
	b, err := definition.Encode(sub)
	if err != nil {
		return "", err
	}
	id := definition.IDOf(b)
	v.mu.Lock()
	_, known := v.byID[id]
	v.mu.Unlock()
	if known {
		return id, nil
	}
	if err := v.store(ctx, id, b); err != nil {
		return "", fmt.Errorf("actors: store the definition of %q: %w", slug, err)
	}
	v.mu.Lock()
	v.byID[id] = sub
	v.mu.Unlock()
	return id, nil
}

// of is the version a run is pinned to: the one its record names, or,
// for a record written before runs were pinned (or outside a node: a
// fork onto another definition), the current one of its agent. ok is
// false when neither exists (an agent not deployed here).
func (v *versions) of(rec *events.Run) (id string, ok bool) {
	if rec.Definition != "" {
		return rec.Definition, true
	}
	id, ok = v.current[rec.Agent]
	return id, ok
}

// model is the model of agent slug of ver, built once per agent digest.
func (v *versions) model(ver definition.Version, slug string) (model.Model, error) {
	digest := ver.Digest(slug)
	v.mu.Lock()
	m, ok := v.models[digest]
	v.mu.Unlock()
	if ok {
		return m, nil
	}
	a, ok := ver.Agents[slug]
	if !ok {
		return nil, fmt.Errorf("%w: agent %q is not in version %s", definition.ErrIncomplete, slug, definition.Short(digest))
	}
	m, err := v.build(a)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if old, ok := v.models[digest]; ok {
		m = old // built twice at once: keep one
	} else {
		v.models[digest] = m
	}
	v.mu.Unlock()
	return m, nil
}

// pinned is what an attempt of a run is given from its version.
type pinned struct {
	id    string
	agent Agent
	subs  []runtime.AgentDefinition
	caps  []runtime.Capability
	model model.Model
}

// resolve is rec's pinned definition. A run of an agent this node does
// not deploy and whose record names no version is errPermanent, as is a
// version that does not hold the run's agent; a version in no storage is
// ErrUnknownVersion (errPermanent too: no member can run it).
func (v *versions) resolve(ctx context.Context, rec *events.Run) (pinned, error) {
	id, ok := v.of(rec)
	if !ok {
		return pinned{}, fmt.Errorf("%w: agent %q is not deployed on this node", errPermanent, rec.Agent)
	}
	return v.resolveID(ctx, rec, id)
}

// resolveID is resolve under version id.
func (v *versions) resolveID(ctx context.Context, rec *events.Run, id string) (pinned, error) {
	ver, err := v.get(ctx, id)
	if errors.Is(err, ErrUnknownVersion) {
		return pinned{}, fmt.Errorf("%w: run %s: %w", errPermanent, rec.RunID, err)
	}
	if err != nil {
		return pinned{}, err
	}
	a, subs, caps, err := ver.Run(rec.Agent)
	if err != nil {
		return pinned{}, fmt.Errorf("%w: run %s, version %s: %w", errPermanent, rec.RunID, definition.Short(id), err)
	}
	m, err := v.model(ver, rec.Agent)
	if err != nil {
		return pinned{}, fmt.Errorf("actors: run %s: the model of version %s: %w", rec.RunID, definition.Short(id), err)
	}
	return pinned{id: id, agent: a, subs: subs, caps: caps, model: m}, nil
}

// DeployedAgent is an agent as this node deploys it now: new runs of it
// are admitted under Version.
type DeployedAgent struct {
	Slug        string `json:"slug"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version"`
}

// Deployed lists the agents this node deploys, by slug.
func (n *Node) Deployed() []DeployedAgent {
	out := make([]DeployedAgent, 0, len(n.versions.current))
	for slug, id := range n.versions.current {
		out = append(out, DeployedAgent{Slug: slug, Description: n.agents[slug].Definition.Description, Version: id})
	}
	slices.SortFunc(out, func(a, b DeployedAgent) int { return strings.Compare(a.Slug, b.Slug) })
	return out
}

// Version returns definition version id, from this node's memory or the
// log's storage: ErrUnknownVersion when no member stored it (and for an
// id of the wrong form).
func (n *Node) Version(ctx context.Context, id string) (definition.Version, error) {
	if err := definition.ValidID(id); err != nil {
		return definition.Version{}, fmt.Errorf("%w: version: %v", ErrInvalid, err)
	}
	return n.versions.get(ctx, id)
}

// PruneVersions removes from the log's storage the definition versions no
// run needs any more. A version is kept
// when it is current on this node, when referenced names it (the
// versions the runs the log still holds name: projections.Runs.Definitions),
// or when it is the closure of a child agent within a kept version (a
// run of it may spawn that child at any time, under that closure); it is
// removed only when, besides, its stored copy was last written more than
// grace ago, by the node's clock. Every member keeps its own current
// versions fresh (keepFresh writes each again once its copy is older than
// a quarter of VersionGrace), so a version current on a member whose runs
// this node's index has not seen yet is never older than that. A removal is
// fenced on the revision read: a member that wrote the version again
// meanwhile wins. It returns the versions removed.
func (n *Node) PruneVersions(ctx context.Context, referenced map[string]bool, grace time.Duration) ([]string, error) {
	v := n.versions
	keep := map[string]bool{}
	for _, id := range v.current {
		keep[id] = true
	}
	for id := range referenced {
		keep[id] = true
		ver, err := v.get(ctx, id)
		if errors.Is(err, ErrUnknownVersion) {
			continue // gone already: its runs cannot run anywhere
		}
		if err != nil {
			return nil, err
		}
		for _, slug := range ver.Slugs() {
			sub, err := ver.Sub(slug)
			if err != nil {
				return nil, err
			}
			subID, err := definition.ID(sub)
			if err != nil {
				return nil, err
			}
			keep[subID] = true
		}
	}
	now := n.now()
	keys, err := v.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("actors: definitions: %w", err)
	}
	var removed []string
	for key := range keys.Keys() {
		e, err := v.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			_ = keys.Stop()
			return removed, fmt.Errorf("actors: definition %s: %w", definition.Short(key), err)
		}
		if age := now.Sub(e.Created()); !keep[key] && age > grace {
			err := v.kv.Purge(ctx, key, jetstream.LastRevision(e.Revision()))
			if err != nil && !isWrongLastRevision(err) {
				_ = keys.Stop()
				return removed, fmt.Errorf("actors: remove definition %s: %w", definition.Short(key), err)
			}
			if err == nil {
				v.mu.Lock()
				delete(v.byID, key)
				v.mu.Unlock()
				removed = append(removed, key)
			}
		}
	}
	return removed, nil
}

// isWrongLastRevision reports a write fenced out by a newer revision of
// the key (JetStream's 10071).
func isWrongLastRevision(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// versionsFresh is how often a node writes its current definition
// versions again (whatever its retention: another member's may prune),
// and VersionGrace how long, at least, an unreferenced version stays
// stored: far beyond it, so that a version current on a live member is
// never that old.
const (
	versionsFresh = time.Hour
	VersionGrace  = 24 * time.Hour
)

// keepFresh writes the node's current versions again every versionsFresh
// until stop is closed (PruneVersions on every member removes versions
// older than VersionGrace that no kept run names).
func (n *Node) keepFresh(stop <-chan struct{}) {
	t := time.NewTicker(versionsFresh)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for _, id := range n.versions.current {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			e, err := n.versions.kv.Get(ctx, id)
			if err == nil && n.now().Sub(e.Created()) > VersionGrace/4 {
				_, err = n.versions.kv.Put(ctx, id, e.Value())
			}
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				n.logger.Warn("actors: keep the current definition version stored", "version", definition.Short(id), "err", err)
			}
		}
	}
}
