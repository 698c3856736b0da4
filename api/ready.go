package api

import (
	"context"
	"net/http"
	"time"
)

// readyTimeout bounds a readiness check made for a request.
const readyTimeout = 3 * time.Second

// unreadyRetryAfter is the Retry-After, in seconds, of a 503 from a node
// that cannot commit now (NATS out, JetStream refusing writes).
const unreadyRetryAfter = "2"

// readyz is GET /readyz: 200 {"ready":true} while the node can take and
// commit work (actors.Node.Ready), else 503 {"ready":false,"reason":...}.
func (x *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if ok, reason := x.cfg.Node.Ready(ctx); !ok {
		w.Header().Set("Retry-After", unreadyRetryAfter)
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true})
}

// admitting answers a request that would start a run: false, after a 503
// {"code":"unavailable"} with Retry-After, when the node cannot commit
// now. The client learns it at once, instead of after the write's
// timeouts, and nothing is written.
func (x *Server) admitting(w http.ResponseWriter, r *http.Request) bool {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if ok, reason := x.cfg.Node.Ready(ctx); !ok {
		unavailable(w, "the node cannot start a run now: %s", reason)
		return false
	}
	return true
}

// unavailable answers 503 {"code":"unavailable"} with Retry-After.
func unavailable(w http.ResponseWriter, format string, args ...any) {
	w.Header().Set("Retry-After", unreadyRetryAfter)
	writeError(w, http.StatusServiceUnavailable, "unavailable", format, args...)
}
