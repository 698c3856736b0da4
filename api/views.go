package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/runtime"
)

// The views of a run and what is done from them (the run page's): its
// timeline and call tree, its transcript, re-drive and fork.

// history loads an owned run's history; false when an answer was written.
func (x *Server) history(w http.ResponseWriter, r *http.Request, principal string) (*replay.History, bool) {
	e, ok := x.owned(w, r, principal)
	if !ok || purged(w, e) {
		return nil, false
	}
	h, err := replay.LoadIn(r.Context(), x.source(), e.SessionID, e.RunID)
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

func (x *Server) view(w http.ResponseWriter, r *http.Request, principal string) {
	h, ok := x.history(w, r, principal)
	if !ok {
		return
	}
	last := h.Last()
	at, err := replay.ParseRevision(r.URL.Query().Get("at"), max(last, 1), last)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "at: %v", err)
		return
	}
	tree, err := x.callTree(r.Context(), h)
	if err != nil {
		// The timeline stands without the tree.
		x.log.Error("api: call tree", "run", h.RunID, "err", err)
	}
	entry, _ := x.cfg.Index.Get(h.RunID)
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
func (x *Server) callTree(ctx context.Context, h *replay.History) (projections.TreeNode, error) {
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
		kids, err := x.cfg.Node.Children(ctx, cur.RunID)
		if err != nil {
			return projections.TreeNode{}, err
		}
		for _, c := range kids {
			ch, err := replay.LoadIn(ctx, x.source(), c.SessionID, c.RunID)
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
func (x *Server) transcript(w http.ResponseWriter, r *http.Request, principal string) {
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

// atHistory reads a request naming a revision and the owned run's
// history; false when an answer was written.
func (x *Server) atHistory(w http.ResponseWriter, r *http.Request, principal string) (atRequest, *replay.History, bool) {
	var req atRequest
	if !decodeBody(w, r, &req) {
		return req, nil, false
	}
	h, ok := x.history(w, r, principal)
	return req, h, ok
}

func (x *Server) redrive(w http.ResponseWriter, r *http.Request, principal string) {
	req, h, ok := x.atHistory(w, r, principal)
	if !ok {
		return
	}
	if req.At < 0 || req.At > h.Last() {
		writeError(w, http.StatusBadRequest, "invalid", "at: %d, the run has revisions 1-%d (0: from the start)", req.At, h.Last())
		return
	}
	s, err := x.cfg.Setup(r.Context(), h.Run)
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

func (x *Server) fork(w http.ResponseWriter, r *http.Request, principal string) {
	req, h, ok := x.atHistory(w, r, principal)
	if !ok {
		return
	}
	if h.Run.ParentRunID != "" {
		writeError(w, http.StatusBadRequest, "invalid", "run: %s is a child run; fork its root", h.RunID)
		return
	}
	store, err := x.cfg.ForkStore(r.Context())
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
	if x.nodeError(w, x.cfg.Node.Adopt(r.Context(), rec.SessionID, rec.RunID)) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"run_id": rec.RunID, "session_id": rec.SessionID, "forked_from": rec.ForkedFrom, "forked_at": rec.ForkedAt})
}

// randomID is a fork's session and run ID suffix.
func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
