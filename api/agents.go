package api

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/actors/definition"
)

// agentVersion is one definition version of an agent as GET /v1/agents
// shows it: how many of the caller's runs name it, not ended (active) and
// kept in the log (kept), and whether new runs are admitted under it.
type agentVersion struct {
	Version string `json:"version"`
	Current bool   `json:"current"`
	Active  int    `json:"active"`
	Kept    int    `json:"kept"`
}

// agentEntry is one agent of GET /v1/agents: deployed on this node now
// (Version is its current version), or no longer, with runs of it kept.
type agentEntry struct {
	Slug        string         `json:"slug"`
	Description string         `json:"description,omitempty"`
	Deployed    bool           `json:"deployed"`
	Version     string         `json:"version,omitempty"`
	Versions    []agentVersion `json:"versions"`
}

// agents lists every agent this node deploys and every one the caller's
// kept runs name, each with its current version and the versions the
// caller's runs use, with counts: what an operator reads before a deploy
// (what is still in flight on the old prompt) and after (what moved). Runs
// of an earlier build name no version ("").
func (x *Server) agents(w http.ResponseWriter, r *http.Request, principal string) {
	use := x.cfg.Index.Versions(principal)
	byslug := map[string]*agentEntry{}
	for _, d := range x.cfg.Node.Deployed() {
		byslug[d.Slug] = &agentEntry{Slug: d.Slug, Description: d.Description, Deployed: true, Version: d.Version}
	}
	for slug := range use {
		if byslug[slug] == nil {
			byslug[slug] = &agentEntry{Slug: slug}
		}
	}
	out := make([]agentEntry, 0, len(byslug))
	for slug, e := range byslug {
		seen := false
		for v, u := range use[slug] {
			e.Versions = append(e.Versions, agentVersion{Version: v, Current: e.Deployed && v == e.Version, Active: u.Active, Kept: u.Kept})
			seen = seen || v == e.Version
		}
		if e.Deployed && !seen {
			e.Versions = append(e.Versions, agentVersion{Version: e.Version, Current: true})
		}
		// The current version first, then by most runs in flight.
		slices.SortFunc(e.Versions, func(a, b agentVersion) int {
			switch {
			case a.Current != b.Current:
				if a.Current {
					return -1
				}
				return 1
			case a.Active != b.Active:
				return b.Active - a.Active
			case a.Kept != b.Kept:
				return b.Kept - a.Kept
			}
			return strings.Compare(a.Version, b.Version)
		})
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b agentEntry) int { return strings.Compare(a.Slug, b.Slug) })
	x.writeView(w, r, http.StatusOK, map[string]any{"agents": out})
}

// versionChange is one field of an agent that differs between two of its
// versions.
type versionChange struct {
	Field   string          `json:"field"`
	Version json.RawMessage `json:"version"`
	Current json.RawMessage `json:"current"`
}

// agentVersionShow answers GET /v1/agents/{agent}/versions/{version}: the
// agent as that version pinned it (its definition, limits, budget and
// model; the agents it may spawn by their own versions' digests), and
// what differs from the agent as deployed now, field by field.
func (x *Server) agentVersionShow(w http.ResponseWriter, r *http.Request, _ string) {
	slug, id := r.PathValue("agent"), r.PathValue("version")
	ver, err := x.cfg.Node.Version(r.Context(), id)
	if x.nodeError(w, err) {
		return
	}
	if _, ok := ver.Agents[slug]; !ok {
		writeError(w, http.StatusNotFound, "not_found", "agent: version %s does not hold agent %q", definition.Short(id), slug)
		return
	}
	show := map[string]any{"agent": slug, "version": id, "definition": ver.Agents[slug], "subagents": subDigests(ver, slug)}
	for _, d := range x.cfg.Node.Deployed() {
		if d.Slug != slug {
			continue
		}
		show["current_version"] = d.Version
		cur, err := x.cfg.Node.Version(r.Context(), d.Version)
		if x.nodeError(w, err) {
			return
		}
		show["changes"] = changes(ver, cur, slug)
	}
	x.writeView(w, r, http.StatusOK, show)
}

// subDigests are the digests of the agents slug may spawn in v (equal
// across versions where that agent is unchanged).
func subDigests(v definition.Version, slug string) map[string]string {
	out := map[string]string{}
	for _, s := range v.Agents[slug].Definition.Subagents {
		out[s] = v.Digest(s)
	}
	return out
}

// changes lists the fields of agent slug that differ between a and b:
// each top-level field of its definition, its limits, budget, model and
// retry policy, and each subagent whose own definition differs.
func changes(a, b definition.Version, slug string) []versionChange {
	out := []versionChange{}
	fields := func(v definition.Version) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		ag := v.Agents[slug]
		if raw, err := json.Marshal(ag.Definition); err == nil {
			_ = json.Unmarshal(raw, &m)
		}
		for name, val := range map[string]any{"limits": ag.Limits, "budget": ag.Budget, "model": ag.Model, "model_config": ag.ModelConfig} {
			if raw, err := json.Marshal(val); err == nil {
				m[name] = raw
			}
		}
		for s, d := range subDigests(v, slug) {
			m["subagent "+s] = json.RawMessage(`"` + definition.Short(d) + `"`)
		}
		return m
	}
	fa, fb := fields(a), fields(b)
	names := map[string]bool{}
	for k := range fa {
		names[k] = true
	}
	for k := range fb {
		names[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(names)) {
		if string(fa[k]) != string(fb[k]) {
			out = append(out, versionChange{Field: k, Version: orNull(fa[k]), Current: orNull(fb[k])})
		}
	}
	return out
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// upgradeRequest is the body of the upgrade endpoints.
type upgradeRequest struct {
	// DryRun checks and lists, and writes nothing.
	DryRun bool `json:"dry_run"`
}

// upgradeRun is POST /v1/runs/{run}/upgrade: the run moves to its agent's
// current definition version at its next model boundary (actors.Upgrade),
// recorded in its log with both versions. 200 with the move (with
// dry_run, what would move); 409 cannot_upgrade naming why the run cannot
// take the new definition (nothing written); 503 while a member of the
// cluster would not read the record.
func (x *Server) upgradeRun(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok || purged(w, e) {
		return
	}
	var req upgradeRequest
	if !decodeBody(w, r, &req) || !req.DryRun && !x.admitting(w, r) {
		return
	}
	res, err := x.cfg.Node.Upgrade(actors.WithPrincipal(r.Context(), principal), e.SessionID, e.RunID, req.DryRun)
	if x.nodeError(w, err) {
		return
	}
	x.writeView(w, r, http.StatusOK, map[string]any{"run_id": res.RunID, "agent": res.Agent, "from": res.From, "to": res.To, "dry_run": req.DryRun})
}

// upgradeAgent is POST /v1/agents/{agent}/upgrade: every run of the
// caller's of that agent that has not ended and runs under another
// version than the current one is moved, or refused with its reason.
// With dry_run it lists what would move and what would be refused, and
// writes nothing. 200 with both lists; 404 for an agent not deployed here.
func (x *Server) upgradeAgent(w http.ResponseWriter, r *http.Request, principal string) {
	slug := r.PathValue("agent")
	var req upgradeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	current := ""
	for _, d := range x.cfg.Node.Deployed() {
		if d.Slug == slug {
			current = d.Version
		}
	}
	if current == "" {
		writeError(w, http.StatusNotFound, "not_found", "agent: %q is not deployed on this node", slug)
		return
	}
	if !req.DryRun && !x.admitting(w, r) {
		return
	}
	moved, refused := []actors.UpgradeResult{}, []actors.UpgradeResult{}
	ctx := actors.WithPrincipal(r.Context(), principal)
	for _, e := range x.cfg.Index.List(principal, true) {
		if e.Agent != slug || !e.Status.Active() || e.Definition == current {
			continue
		}
		res, err := x.cfg.Node.Upgrade(ctx, e.SessionID, e.RunID, req.DryRun)
		switch {
		case err == nil:
			moved = append(moved, res)
		case errors.Is(err, actors.ErrCannotUpgrade):
			refused = append(refused, res)
		default:
			if x.nodeError(w, err) {
				return
			}
		}
	}
	x.writeView(w, r, http.StatusOK, map[string]any{"agent": slug, "to": current, "dry_run": req.DryRun, "moved": moved, "refused": refused})
}
