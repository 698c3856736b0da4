package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime"
)

// registerWeb adds the web views to the node's HTTP API:
//
//	GET  /ui/                       the list of runs (ui/runs.html; /ui/runs redirects to it)
//	GET  /ui/runs/{run}             the page (static; it reads the bearer token from the URL fragment
//	                                 #token=..., which browsers never send to the server)
//	GET  /v1/runs/{run}/view        timeline, call tree and usage (?at=REV: up to a revision)
//	GET  /v1/runs/{run}/transcript  the run's session: every message, its compactions, the current window
//	POST /v1/runs/{run}/redrive     re-drive from {"at": REV} (0: the start) against the log
//	POST /v1/runs/{run}/fork        fork at {"at": REV} into a new session and run it on this node
//
// The page follows the run live through /v1/runs/{run}/events (SSE).
func (x *api) registerWeb(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { writePage(w, runsPage) })
	mux.HandleFunc("GET /ui/runs", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.HandleFunc("GET /ui/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		if events.ValidID(r.PathValue("run")) != nil {
			http.NotFound(w, r)
			return
		}
		writePage(w, runPage)
	})
	mux.HandleFunc("GET /v1/runs/{run}/view", x.auth(x.view))
	mux.HandleFunc("GET /v1/runs/{run}/transcript", x.auth(x.transcript))
	mux.HandleFunc("POST /v1/runs/{run}/redrive", x.auth(x.redrive))
	mux.HandleFunc("POST /v1/runs/{run}/fork", x.auth(x.fork))
}

// writePage writes one of the static pages: its scripts and styles inline,
// everything else from this origin only.
func writePage(w http.ResponseWriter, page string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write([]byte(page))
}

// history loads an owned run's history; false when an answer was written.
func (x *api) history(w http.ResponseWriter, r *http.Request, principal string) (*replay.History, bool) {
	e, ok := x.owned(w, r, principal)
	if !ok {
		return nil, false
	}
	h, err := replay.LoadIn(r.Context(), x.a.source(), e.SessionID, e.RunID)
	if errors.Is(err, replay.ErrNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "run %q has no events yet", e.RunID)
		return nil, false
	}
	if err != nil {
		x.log.Error("api: load history", "run", e.RunID, "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "the log could not be read")
		return nil, false
	}
	return h, true
}

func (x *api) view(w http.ResponseWriter, r *http.Request, principal string) {
	h, ok := x.history(w, r, principal)
	if !ok {
		return
	}
	last := h.Last()
	at, err := parseRevision("at", r.URL.Query().Get("at"), max(last, 1), last)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "%v", err)
		return
	}
	tree, err := x.callTree(r.Context(), h)
	if err != nil {
		// The timeline stands without the tree.
		x.log.Error("api: call tree", "run", h.RunID, "err", err)
	}
	entry, _ := x.ix.Get(h.RunID)
	var phase runtime.Phase
	if st, err := h.At(at); err == nil {
		phase = st.Checkpoint.Phase
	}
	x.writeView(w, r, http.StatusOK, map[string]any{"run": entry, "record": h.Run, "at": at, "last": last, "phase": phase,
		"timeline": h.Timeline(at), "usage": h.Usage(at), "tree": tree})
}

// callTree builds the call tree of a run and its descendants from their
// sessions' events (a projection built per request: one view reads a few
// sessions).
func (x *api) callTree(ctx context.Context, h *replay.History) (projections.TreeNode, error) {
	t := projections.NewCallTree()
	seen := map[string]bool{}
	queue := []*replay.History{h}
	for len(queue) > 0 && len(seen) < 200 {
		cur := queue[0]
		queue = queue[1:]
		if seen[cur.SessionID] {
			continue
		}
		seen[cur.SessionID] = true
		for _, e := range cur.Events {
			if err := t.Apply(e); err != nil {
				return projections.TreeNode{}, fmt.Errorf("call tree of %s: %w", cur.RunID, err)
			}
		}
		// A child's creation is in its own session: the node's records
		// name the children, their sessions then feed the tree.
		kids, err := x.a.node.Children(ctx, cur.RunID)
		if err != nil {
			return projections.TreeNode{}, err
		}
		for _, c := range kids {
			ch, err := replay.LoadIn(ctx, x.a.source(), c.SessionID, c.RunID)
			if errors.Is(err, replay.ErrNotFound) {
				continue // recorded as a child, its creation not written yet
			}
			if err != nil {
				return projections.TreeNode{}, err
			}
			queue = append(queue, ch)
		}
	}
	n, _ := t.Tree(h.RunID)
	return n, nil
}

// transcript is the transcript view of the run's session, built by the
// transcripts projection over the session's events.
func (x *api) transcript(w http.ResponseWriter, r *http.Request, principal string) {
	h, ok := x.history(w, r, principal)
	if !ok {
		return
	}
	t := projections.NewTranscripts(h.SessionID)
	for _, e := range h.Events {
		_ = t.Apply(e)
	}
	s, _ := t.Session(h.SessionID)
	x.writeView(w, r, http.StatusOK, map[string]any{"session_id": h.SessionID, "entries": s.Entries, "compactions": s.Compactions, "window": s.Window()})
}

type atRequest struct {
	At int64 `json:"at"`
}

func (x *api) redrive(w http.ResponseWriter, r *http.Request, principal string) {
	var req atRequest
	if !decodeBody(w, r, &req) {
		return
	}
	h, ok := x.history(w, r, principal)
	if !ok {
		return
	}
	if req.At < 0 || req.At > h.Last() {
		writeError(w, http.StatusBadRequest, "invalid", "at: %d, the run has revisions 1-%d (0: from the start)", req.At, h.Last())
		return
	}
	s, err := setupFor(x.a.dep, h.Run.Agent)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "%v", err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	rep, err := replay.Redrive(ctx, h, req.At, s)
	if err != nil {
		writeError(w, http.StatusConflict, "redrive", "%v", err)
		return
	}
	x.writeView(w, r, http.StatusOK, map[string]any{"report": rep, "exact": rep.Exact()})
}

func (x *api) fork(w http.ResponseWriter, r *http.Request, principal string) {
	var req atRequest
	if !decodeBody(w, r, &req) {
		return
	}
	h, ok := x.history(w, r, principal)
	if !ok {
		return
	}
	if h.Run.ParentRunID != "" {
		writeError(w, http.StatusBadRequest, "invalid", "run: %s is a child run; fork its root", h.RunID)
		return
	}
	store, err := logStore(r.Context(), x.a.nc, x.a.js, "fork", x.a.keys)
	if err != nil {
		x.nodeError(w, err)
		return
	}
	defer store.Close(context.WithoutCancel(r.Context()))
	rec, err := replay.Fork(r.Context(), store, h, replay.ForkOptions{SessionID: "fork-" + randomID(), RunID: "fork-" + randomID(), At: req.At})
	if errors.Is(err, replay.ErrForkInput) {
		writeError(w, http.StatusBadRequest, "invalid", "%v", err)
		return
	}
	if x.nodeError(w, err) {
		return
	}
	if x.nodeError(w, x.a.node.Adopt(r.Context(), rec.SessionID, rec.RunID)) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"run_id": rec.RunID, "session_id": rec.SessionID, "forked_from": rec.ForkedFrom, "forked_at": rec.ForkedAt})
}

// setupFor is an agent's contract as a deployment defines it.
func setupFor(dep *deployment, agent string) (replay.Setup, error) {
	a, ok := dep.agents[agent]
	if !ok {
		return replay.Setup{}, &flagError{"agents", fmt.Sprintf("agent %q is not deployed here", agent)}
	}
	s := replay.Setup{Definition: a.agent.Definition, Limits: a.agent.Limits, Budget: a.agent.Budget, Redactor: redactor(nil)}
	for _, sub := range a.agent.Definition.Subagents {
		s.Subagents = append(s.Subagents, dep.agents[sub].agent.Definition)
	}
	caps := map[string]runtime.Capability{}
	for _, c := range builtinCapabilities() {
		caps[c.Name] = c
	}
	for _, name := range a.agent.Definition.Capabilities {
		c, ok := caps[name]
		if !ok {
			return replay.Setup{}, fmt.Errorf("agent %s: capability %q is served by an external service; re-drive needs the built-in catalog", agent, name)
		}
		s.Capabilities = append(s.Capabilities, c)
	}
	return s, nil
}
