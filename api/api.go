// Package api is the node's HTTP API: runs started, listed, shown,
// continued, cancelled and followed (server-sent events); their views
// (timeline, call tree, transcript), re-drive and fork; readiness. Every
// request is resolved to a principal (a bearer token's, or "local" on a
// loopback node without tokens), and a principal sees only its own runs
// (C10: an ID never establishes authority). Every view is redacted, but
// for a principal granted raw values.
//
//	GET  /healthz                   200 while the process serves
//	GET  /readyz                    200 while the node can take and commit work, else 503 with the reason
//	POST /v1/runs                   start a run {agent, message} (Idempotency-Key: a retry returns the same run)
//	GET  /v1/runs                   the caller's runs from the run index, filtered and paged
//	GET  /v1/runs/{run}             a run: status, reply, error, children, usage
//	GET  /v1/runs/{run}/events      its events as server-sent events (Last-Event-ID resumes)
//	POST /v1/runs/{run}/continue    a new run in its session {message}
//	POST /v1/runs/{run}/cancel      cancel it
//	GET  /v1/runs/{run}/view        timeline, call tree and usage (?at=REV: up to a revision)
//	GET  /v1/runs/{run}/transcript  the run's session: every message, its compactions, the current window
//	POST /v1/runs/{run}/redrive     re-drive from {"at": REV} (0: the start) against the log
//	POST /v1/runs/{run}/fork        fork at {"at": REV} into a new session and run it on this node
//
// A run whose session was purged (package retention) reads purged with
// how it had ended; what is gone with its events answers 410 Gone.
//
// Guard wraps the whole surface against cross-site use.
package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/replay"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// Config is what the API serves.
type Config struct {
	// Node runs the runs; required.
	Node *actors.Node
	// Index is the run index the list and the runs' entries are read
	// from; required.
	Index *runindex.Index
	// JS reads the log (the event streams, the views); required.
	JS njs.JetStream
	// Stream is the log's stream; "" means events.DefaultStream.
	Stream string
	// Keys open sealed events; nil: the log is plain.
	Keys *events.Keyring
	// Redactor redacts every view but a raw principal's; nil redacts
	// nothing.
	Redactor runtime.Redactor
	// Tokens maps each bearer token to its principal; empty: no
	// authentication, every caller is "local" (a loopback node only).
	Tokens map[string]string
	// Raw are the principals granted unredacted views.
	Raw map[string]bool
	// Setup is the contract a run ran under, for its re-drive: its
	// pinned definition version (run.Definition), or for a run that names
	// none its agent's as deployed now; required.
	Setup func(ctx context.Context, run events.Run) (replay.Setup, error)
	// ForkStore opens a store on the log for a fork to write its new
	// session with; required.
	ForkStore func(ctx context.Context) (*jetstream.Store, error)
	// Logger; nil discards.
	Logger *slog.Logger
}

// Server serves the API over one node.
type Server struct {
	cfg Config // as New checked it, Stream named
	log *slog.Logger
}

// New checks cfg and returns the API over it.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Node == nil:
		return nil, errors.New("api: Config.Node is required")
	case cfg.Index == nil:
		return nil, errors.New("api: Config.Index is required")
	case cfg.JS == nil:
		return nil, errors.New("api: Config.JS is required")
	case cfg.Setup == nil:
		return nil, errors.New("api: Config.Setup is required")
	case cfg.ForkStore == nil:
		return nil, errors.New("api: Config.ForkStore is required")
	}
	if cfg.Stream != "" {
		if err := events.CheckStreamName(cfg.Stream); err != nil {
			return nil, fmt.Errorf("api: Config.Stream: %w", err)
		}
	}
	for who := range cfg.Raw {
		known := len(cfg.Tokens) == 0 && who == "local"
		for _, p := range cfg.Tokens {
			known = known || p == who
		}
		if !known {
			return nil, fmt.Errorf("api: Config.Raw: %q is no principal of a token", who)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Stream = events.StreamName(cfg.Stream)
	return &Server{cfg: cfg, log: log}, nil
}

// Register adds the API's routes to mux. Its streams (events) end when
// stopping is done: they never go idle, so a server's shutdown would
// otherwise wait out its deadline for them.
func (x *Server) Register(mux *http.ServeMux, stopping context.Context) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /readyz", x.readyz)
	mux.HandleFunc("POST /v1/runs", x.auth(x.start))
	mux.HandleFunc("GET /v1/runs", x.auth(x.list))
	mux.HandleFunc("GET /v1/runs/{run}", x.auth(x.show))
	mux.Handle("GET /v1/runs/{run}/events", UntilStopping(stopping, x.auth(x.events)))
	mux.HandleFunc("POST /v1/runs/{run}/continue", x.auth(x.continueRun))
	mux.HandleFunc("POST /v1/runs/{run}/cancel", x.auth(x.cancel))
	mux.HandleFunc("GET /v1/runs/{run}/view", x.auth(x.view))
	mux.HandleFunc("GET /v1/runs/{run}/transcript", x.auth(x.transcript))
	mux.HandleFunc("POST /v1/runs/{run}/redrive", x.auth(x.redrive))
	mux.HandleFunc("POST /v1/runs/{run}/fork", x.auth(x.fork))
	mux.HandleFunc("GET /v1/agents", x.auth(x.agents))
	mux.HandleFunc("GET /v1/agents/{agent}/versions/{version}", x.auth(x.agentVersionShow))
	mux.HandleFunc("POST /v1/runs/{run}/upgrade", x.auth(x.upgradeRun))
	mux.HandleFunc("POST /v1/agents/{agent}/upgrade", x.auth(x.upgradeAgent))
}

// source is the log the views read.
func (x *Server) source() projections.Source {
	return projections.Source{JS: x.cfg.JS, Stream: x.cfg.Stream, Keys: x.cfg.Keys}
}

// Authenticates reports whether the API takes bearer tokens; without, every
// caller is the local principal (a loopback node only).
func (x *Server) Authenticates() bool { return len(x.cfg.Tokens) > 0 }

// Principal resolves a bearer token to its principal: false for a token
// the node does not know. Without tokens there is nothing to resolve.
func (x *Server) Principal(token string) (string, bool) {
	principal := ""
	for tok, who := range x.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(token), []byte(tok)) == 1 {
			principal = who
		}
	}
	return principal, principal != ""
}

// untilStopping ends h's requests when stopping is done: the event
// stream and MCP's (its session's stream, a get_run waiting for its run)
// are requests that never go idle. A get_run cut short answers the run's
// status as it is.
func UntilStopping(stopping context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// principalKey carries the caller's principal in a request's context, for
// what answers it (writeView's redaction).
type principalKey struct{}

// redactorFor is the redaction of principal's views: none for a principal
// granted raw values, the node's otherwise.
func (x *Server) redactorFor(principal string) runtime.Redactor {
	if x.cfg.Raw[principal] || x.cfg.Redactor == nil {
		return runtime.Secrets{}
	}
	return x.cfg.Redactor
}

// apiError is the JSON error body.
func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": fmt.Sprintf(format, args...)}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// auth resolves the caller's principal: a bearer token when tokens are
// configured, the local principal otherwise (loopback only).
func (x *Server) auth(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		principal := "local"
		if len(x.cfg.Tokens) > 0 {
			got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			var known bool
			if principal, known = x.Principal(got); !bearer || !known {
				writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal)), principal)
	}
}

// owned returns the index entry of a run the principal owns; any other run
// is reported as not found (C10: IDs never establish authority).
func (x *Server) owned(w http.ResponseWriter, r *http.Request, principal string) (runindex.Entry, bool) {
	id := r.PathValue("run")
	e, ok := x.cfg.Index.Get(id)
	if !ok {
		rec, err := x.cfg.Node.Lookup(r.Context(), id)
		switch {
		case err == nil:
			e, ok = runindex.Entry{RunID: rec.RunID, SessionID: rec.SessionID, Agent: rec.Agent, Owner: rec.Owner, ParentRunID: rec.ParentRunID, RootRunID: rec.RootRunID}, true
		case !errors.Is(err, actors.ErrNotFound) && events.ValidID(id) == nil:
			// Not "no such run": the log could not be read (NATS out).
			x.nodeError(w, err)
			return runindex.Entry{}, false
		}
	}
	if !ok || e.Owner != principal {
		writeError(w, http.StatusNotFound, "not_found", "no run %q", id)
		return runindex.Entry{}, false
	}
	return e, true
}

// purged answers 410 Gone for a run whose session was purged (its events
// are gone: docs/operations.md, Retention), saying when and how it had
// ended; false when the run is not purged.
func purged(w http.ResponseWriter, e runindex.Entry) bool {
	if e.Status != runtime.StatusPurged {
		return false
	}
	writeError(w, http.StatusGone, "purged", "run %q was purged at %s, its session's retention having run out (it had ended %s at %s)",
		e.RunID, e.Purged.UTC().Format(time.RFC3339), e.EndedAs, e.Updated.UTC().Format(time.RFC3339))
	return true
}

// maxBody is the largest request body the API reads.
const maxBody = 1 << 20

// decodeBody decodes a JSON request body into v: at most maxBody bytes
// (413 beyond), valid UTF-8 without lone surrogates (400: the JSON decoder
// would replace them silently), one value with known fields only (400).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "request body: over the limit of %d bytes", tooLarge.Limit)
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, "bad_body", "request body: %v", err)
		return false
	}
	if err := checkJSONText(raw); err != nil {
		writeError(w, http.StatusBadRequest, "bad_json", "request body: %v", err)
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad_json", "request body: %v", err)
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "bad_json", "request body: more than one JSON value")
		return false
	}
	return true
}

// start is POST /v1/runs. With an Idempotency-Key header the start is
// idempotent per principal: a retry with the same key and body answers 200
// with the run the key started first (Idempotent-Replayed: true), running
// or ended; the same key with another agent or message is a 409
// idempotency_conflict. A new run is a 201. A 503 (the node cannot admit a
// run now, nothing written) comes with Retry-After.
func (x *Server) start(w http.ResponseWriter, r *http.Request, principal string) {
	key := ""
	if keys, ok := r.Header[IdempotencyHeader]; ok {
		if len(keys) != 1 {
			writeError(w, http.StatusBadRequest, "invalid", "%s header: given %d times, want once", IdempotencyHeader, len(keys))
			return
		}
		if why := actors.IdempotencyKeyProblem(keys[0]); why != "" {
			writeError(w, http.StatusBadRequest, "invalid", "%s header: %s", IdempotencyHeader, why)
			return
		}
		key = keys[0]
	}
	var req struct {
		Agent   string `json:"agent"`
		Message string `json:"message"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Agent == "" {
		writeError(w, http.StatusBadRequest, "invalid", "agent: is required")
		return
	}
	if !x.admitting(w, r) { // ready.go: a 503 at once while the node cannot commit
		return
	}
	s, err := x.cfg.Node.StartRun(r.Context(), actors.StartRequest{Owner: principal, Agent: req.Agent, Message: req.Message, IdempotencyKey: key})
	if x.nodeError(w, err) {
		return
	}
	status := http.StatusCreated
	if s.Existing {
		status = http.StatusOK
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, status, map[string]string{"run_id": s.RunID, "session_id": s.SessionID})
}

// IdempotencyHeader is POST /v1/runs's idempotency key (canonical form).
const IdempotencyHeader = "Idempotency-Key"

// retryAfter is the Retry-After of a 503 from a node that cannot admit a
// run now, in seconds.
const retryAfter = "2"

func (x *Server) nodeError(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, actors.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "%v", err)
	case errors.Is(err, actors.ErrCannotUpgrade):
		writeError(w, http.StatusConflict, "cannot_upgrade", "%v", err)
	case errors.Is(err, actors.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid", "%v", err)
	case errors.Is(err, actors.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "%v", err)
	case errors.Is(err, actors.ErrBusy):
		writeError(w, http.StatusConflict, "busy", "%v", err)
	case errors.Is(err, actors.ErrPurged):
		writeError(w, http.StatusGone, "purged", "%v", err)
	case errors.Is(err, actors.ErrIdempotencyConflict):
		writeError(w, http.StatusConflict, "idempotency_conflict", "%v", err)
	case errors.Is(err, actors.ErrUnavailable):
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "%v", err)
	case jetstream.Unavailable(err): // NATS out, JetStream refusing writes: nothing to fix in the request
		unavailable(w, "NATS cannot serve the request now: %v", err)
	default:
		x.log.Error("api", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "the node could not complete the request")
	}
	return true
}

// list answers GET /v1/runs?status=&agent=&parent=&since=&until=&q=&children=&cursor=&limit=
// from the run index (never the log): the principal's runs, newest first,
// a page at a time. A parameter that does not parse is a 400 naming it.
func (x *Server) list(w http.ResponseWriter, r *http.Request, principal string) {
	q, err := runQuery(r.URL.Query())
	if err == nil {
		q.Owner = principal
		var page projections.RunPage
		if page, err = x.cfg.Index.Query(q); err == nil {
			x.writeView(w, r, http.StatusOK, page)
			return
		}
	}
	writeError(w, http.StatusBadRequest, "bad_query", "%v", err)
}

// runQuery reads a run query from URL parameters, naming the first that
// does not parse (the index checks the values: statuses, the limit's
// range, the cursor).
func runQuery(v url.Values) (projections.RunQuery, error) {
	q := projections.RunQuery{Agent: v.Get("agent"), Parent: v.Get("parent"), Q: v.Get("q"), Cursor: v.Get("cursor")}
	for _, s := range v["status"] {
		for _, st := range strings.Split(s, ",") {
			if st = strings.TrimSpace(st); st != "" {
				q.Statuses = append(q.Statuses, runtime.CallStatus(st))
			}
		}
	}
	var err error
	if c := v.Get("children"); c != "" {
		if q.Children, err = strconv.ParseBool(c); err != nil {
			return q, fmt.Errorf("children: %q: want true or false", c)
		}
	}
	for _, p := range []struct {
		name string
		at   *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if s := v.Get(p.name); s != "" {
			if *p.at, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return q, fmt.Errorf("%s: %q: want an RFC 3339 time (2026-12-01T09:00:00Z)", p.name, s)
			}
		}
	}
	if l := v.Get("limit"); l != "" {
		if q.Limit, err = strconv.Atoi(l); err != nil || q.Limit < 1 {
			return q, fmt.Errorf("limit: %q: want 1 to %d", l, projections.MaxRunLimit)
		}
	}
	return q, nil
}

func (x *Server) show(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok {
		return
	}
	if e.Status == runtime.StatusPurged {
		// What the index keeps of it: how it ended, and when it was purged.
		x.writeView(w, r, http.StatusOK, map[string]any{"run_id": e.RunID, "session_id": e.SessionID, "agent": e.Agent, "parent_run_id": e.ParentRunID,
			"status": e.Status, "ended_as": e.EndedAs, "created": e.Created, "ended": e.Updated, "purged": e.Purged, "definition": e.Definition})
		return
	}
	st, reply, errText, err := x.cfg.Node.Status(r.Context(), e.SessionID, e.RunID)
	if x.nodeError(w, err) {
		return
	}
	kids, usage, err := runDetails(r.Context(), x.cfg.Node, x.cfg.Index, e)
	if x.nodeError(w, err) {
		return
	}
	status := runtime.RunStatus(st, reply)
	if status == runtime.StatusRunning && e.Status == runtime.StatusWaiting {
		// The log's records say running; the index, which reads the
		// commits, knows it is parked on its children.
		status = runtime.StatusWaiting
	}
	if why, parked := x.cfg.Node.Unreadable(e.RunID); parked && status.Active() {
		// This node's build cannot read the run's log (a newer schema):
		// say so, rather than running.
		status, errText = runtime.StatusParked, why
	}
	x.writeView(w, r, http.StatusOK, map[string]any{"run_id": e.RunID, "session_id": e.SessionID, "agent": e.Agent, "parent_run_id": e.ParentRunID,
		"status": status, "reply": reply, "error": errText, "children": kids, "usage": usage, "definition": e.Definition})
}

// runReader is what a run's view reads of the node (an *actors.Node).
type runReader interface {
	Status(ctx context.Context, sessionID, runID string) (runtime.CallStatus, *runtime.Reply, string, error)
	Usage(ctx context.Context, rootRunID string) (steps int, inputTokens, outputTokens int64, err error)
	Children(ctx context.Context, runID string) ([]events.Run, error)
}

// indexReader is what a run's view reads of the run index.
type indexReader interface {
	Get(runID string) (runindex.Entry, bool)
}

// runDetails reads a run's children with their statuses and its root's
// usage. A read that fails fails the view: a view that showed no children
// or zero usage because NATS was out would state something false. A root
// whose session was purged has no usage left (its ledger entry went with
// it): usage is then nil.
func runDetails(ctx context.Context, runs runReader, ix indexReader, e runindex.Entry) (kids []map[string]any, usage map[string]int64, err error) {
	if root, ok := ix.Get(e.RootRunID); !ok || root.Status != runtime.StatusPurged {
		steps, in, out, err := runs.Usage(ctx, e.RootRunID)
		if err != nil {
			return nil, nil, fmt.Errorf("usage of %s: %w", e.RootRunID, err)
		}
		usage = map[string]int64{"steps": int64(steps), "input_tokens": in, "output_tokens": out}
	}
	children, err := runs.Children(ctx, e.RunID)
	if err != nil {
		return nil, nil, fmt.Errorf("children of %s: %w", e.RunID, err)
	}
	kids = make([]map[string]any, 0, len(children))
	for _, c := range children {
		cst, creply, _, err := runs.Status(ctx, c.SessionID, c.RunID)
		if err != nil {
			return nil, nil, fmt.Errorf("status of child %s: %w", c.RunID, err)
		}
		agent := c.Agent
		if agent == "" { // a purged child: the index keeps its agent
			if ce, ok := ix.Get(c.RunID); ok {
				agent = ce.Agent
			}
		}
		kids = append(kids, map[string]any{"run_id": c.RunID, "session_id": c.SessionID, "agent": agent, "call_id": c.ParentCallID, "status": runtime.RunStatus(cst, creply)})
	}
	return kids, usage, nil
}

func (x *Server) continueRun(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok || purged(w, e) {
		return
	}
	var req struct {
		Message string `json:"message"`
	}
	if !decodeBody(w, r, &req) || !x.admitting(w, r) {
		return
	}
	run, err := x.cfg.Node.Continue(r.Context(), e.SessionID, req.Message)
	if x.nodeError(w, err) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"run_id": run, "session_id": e.SessionID})
}

func (x *Server) cancel(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok || purged(w, e) {
		return
	}
	st, err := x.cfg.Node.Cancel(r.Context(), e.SessionID, e.RunID, "cancelled through the API")
	if x.nodeError(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": e.RunID, "status": st})
}

// events streams a run's events from the log as server-sent events, in
// order, from its first event, redacted, until the run has finished.
func (x *Server) events(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok || purged(w, e) {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "internal", "streaming unsupported")
		return
	}
	// A client that reconnects (an EventSource does by itself) resumes
	// after the last event it received: the events' IDs are their
	// sequences in the log.
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid", "Last-Event-ID %q: want the id of an event of this stream (a log sequence)", v)
			return
		}
		after = n
	}
	st, err := x.cfg.JS.Stream(r.Context(), x.cfg.Stream)
	if x.nodeError(w, err) {
		return
	}
	cfg := njs.OrderedConsumerConfig{FilterSubjects: []string{events.RunAll(e.SessionID, e.RunID)}, DeliverPolicy: njs.DeliverAllPolicy}
	ended := false
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = njs.DeliverByStartSequencePolicy, after+1
		// The client may have had the run's last event already: then
		// there is nothing to wait for.
		last, err := st.GetLastMsgForSubject(r.Context(), events.RunAll(e.SessionID, e.RunID))
		if err != nil && !errors.Is(err, njs.ErrMsgNotFound) {
			x.nodeError(w, err)
			return
		}
		if last != nil && last.Sequence <= after {
			subj, perr := events.ParseSubject(last.Subject)
			ended = perr == nil && subj.Kind.Final()
		}
	}
	var cons njs.Consumer
	if !ended {
		if cons, err = st.OrderedConsumer(r.Context(), cfg); x.nodeError(w, err) {
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	if ended {
		fmt.Fprint(w, "event: end\ndata: {}\n\n")
		flusher.Flush()
		return
	}
	it, err := cons.Messages()
	if err != nil {
		return
	}
	defer it.Stop()
	go func() { <-r.Context().Done(); it.Stop() }()
	for {
		msg, err := it.Next()
		if err != nil {
			return
		}
		meta, _ := msg.Metadata()
		var seq uint64
		if meta != nil {
			seq = meta.Sequence.Stream
		}
		body, oerr := x.cfg.Keys.Open(msg.Data())
		if oerr != nil {
			// Sealed with a key this node does not hold: say so, in
			// the stream, rather than pass ciphertext on or stop.
			b, _ := json.Marshal(map[string]string{"error": oerr.Error()})
			fmt.Fprintf(w, "id: %d\nevent: error\ndata: %s\n\n", seq, b)
			flusher.Flush()
			continue
		}
		ev, derr := events.Decode(body)
		typ := "unknown"
		if derr == nil {
			typ = string(ev.Type)
		}
		fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", seq, typ, RedactJSON(x.redactorFor(principal), body))
		flusher.Flush()
		if subj, err := events.ParseSubject(msg.Subject()); err == nil && subj.Kind.Final() {
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
			flusher.Flush()
			return
		}
	}
}
