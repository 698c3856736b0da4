package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// serveOptions configure `node serve`. Precedence: flags, then CAIRN_*
// environment variables, then defaults.
type serveOptions struct {
	nodeOptions
	listen string
	// tokens maps a bearer token to its principal (the runs' owner).
	tokens map[string]string
	// raw are the principals whose views are not redacted
	// (--raw-principals): they see the secrets their runs saw.
	raw string
}

func serveCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := serveOptions{}
	fs.StringVar(&o.agentsDir, "agents", "examples/agents", "directory of agent definitions")
	fs.StringVar(&o.data, "data", ".cairn", "JetStream data directory of the embedded server")
	fs.StringVar(&o.natsURL, "nats", "", "existing NATS server URL")
	fs.StringVar(&o.model, "model", "", "model for every agent")
	fs.BoolVar(&o.noSync, "nosync", false, "embedded server without SyncAlways")
	groupCommitFlag(fs, &o.groupCommit)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8700", "HTTP address")
	fs.StringVar(&o.mcpServers, "mcp-servers", "", "file of MCP servers whose tools are capabilities (YAML or JSON)")
	payloadKeysFlag(fs, &o.keys)
	token := fs.String("token", "", "bearer token of the default principal")
	fs.StringVar(&o.raw, "raw-principals", "", "comma-separated principals whose views of their own runs are not redacted (see docs/operations.md, Security)")
	logs := logFlags(fs)
	config := fs.String("config", "", "configuration file (YAML or JSON); flags and CAIRN_* variables override it")
	o.cluster.flags(fs) // cluster.go
	if err := parseFlags(fs, args, append([]string{"agents", "data", "nats", "model", "group-commit", "mcp-servers", "payload-keys", "log", "log-level", "config", "listen", "token", "raw-principals"}, clusterFlagNames...)...); err != nil {
		return parseFailed(stderr, "node serve", err)
	}
	if *config != "" {
		if err := applyConfig(fs, *config); err != nil {
			fmt.Fprintln(stderr, "node serve:", err)
			return 2
		}
	}
	if err := o.cluster.validate(o.natsURL); err != nil {
		fmt.Fprintln(stderr, "node serve:", err)
		return 2
	}
	tokens, err := parseTokens(os.Getenv("CAIRN_TOKENS"))
	if err != nil {
		fmt.Fprintln(stderr, "node serve:", err)
		return 2
	}
	o.tokens = tokens
	if *token != "" {
		o.tokens[*token] = "default"
	}
	o.logger = logs.logger(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, o, nil); err != nil {
		fmt.Fprintln(stderr, "node serve:", err)
		return 1
	}
	return 0
}

// parseTokens reads "alice=tok1,bob=tok2" (CAIRN_TOKENS). A pair that is
// not principal=token, or a token given twice, is an error naming the pair
// by its position and principal, never by its token: a typo must not leave
// a principal locked out, or two principals sharing one token, unnoticed.
func parseTokens(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, pair := range strings.Split(s, ",") {
		owner, tok, ok := strings.Cut(strings.TrimSpace(pair), "=")
		owner, tok = strings.TrimSpace(owner), strings.TrimSpace(tok)
		switch {
		case !ok: // the entry may be a bare token: never print it
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d has no '=': want principal=token, comma-separated", i+1)
		case owner == "":
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d has no principal before its '='", i+1)
		case tok == "":
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d (principal %q) has no token", i+1, owner)
		case out[tok] != "":
			return nil, fmt.Errorf("CAIRN_TOKENS: entry %d (principal %q): its token is also %q's", i+1, owner, out[tok])
		}
		out[tok] = owner
	}
	return out, nil
}

// loopback reports whether addr listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serve runs the node and its HTTP API until ctx ends. ready, when set,
// receives the bound address.
func serve(ctx context.Context, o serveOptions, ready chan<- string) error {
	if !loopback(o.listen) && len(o.tokens) == 0 {
		return fmt.Errorf("listening on %s needs authentication: set --token or CAIRN_TOKENS", o.listen)
	}
	m := newMetrics()
	o.metrics = m
	started := time.Now()                     // cairn_run_seconds counts the ends from here on
	a, err := startMember(ctx, o.nodeOptions) // startApp, retried in a cluster (cluster.go)
	if err != nil {
		return err
	}
	defer a.close(context.Background())
	ix, err := runindex.Start(ctx, a.source(), runindex.Hooks{OnEnd: m.runEnded(a.node.WasHolder, started)})
	if err != nil {
		return err
	}
	defer ix.Close(context.Background())
	m.index = ix
	raw, err := rawPrincipals(o.raw, o.tokens)
	if err != nil {
		return err
	}
	api := &api{a: a, ix: ix, tokens: o.tokens, raw: raw, log: o.logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /readyz", api.readyz) // ready.go
	mux.Handle("GET /metrics", m)
	mux.HandleFunc("POST /v1/runs", api.auth(api.start))
	mux.HandleFunc("GET /v1/runs", api.auth(api.list))
	mux.HandleFunc("GET /v1/runs/{run}", api.auth(api.show))
	// Streams never go idle: they end when the server begins to stop,
	// or its shutdown would wait out its deadline for them.
	stopping, stopStreams := context.WithCancel(context.Background())
	defer stopStreams()
	mux.Handle("GET /v1/runs/{run}/events", untilStopping(stopping, api.auth(api.events)))
	mux.HandleFunc("POST /v1/runs/{run}/continue", api.auth(api.continueRun))
	mux.HandleFunc("POST /v1/runs/{run}/cancel", api.auth(api.cancel))
	// web.go: the run view, replay, re-drive and fork.
	api.registerWeb(mux)
	mux.Handle("/mcp", untilStopping(stopping, api.mcpHandler())) // Cairn as an MCP server (mcp.go), same tokens
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: guard(mux, len(o.tokens) > 0), ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(stopStreams)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	o.logger.Info("node serving", "addr", ln.Addr().String(), "agents", len(a.dep.agents), "auth", len(o.tokens) > 0)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The embedded server's JetStream, once unable to store, stays so
	// until the server restarts: serve exits non-zero (watch.go).
	stored := make(chan error, 1)
	if a.health != nil {
		t := time.NewTicker(jetStreamCheck)
		defer t.Stop()
		go func() { stored <- watchJetStream(ctx, t.C, a.health, jetStreamStrikes) }()
	}
	var fatal error
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	case fatal = <-stored:
		if fatal != nil {
			o.logger.Error("node stops: a restart of the node restarts its NATS server", "err", fatal)
			// Nothing can commit until the restart: attempts are not
			// drained, they are cancelled at once (their runs resume
			// from their last commit after the restart).
			dead, cancel := context.WithCancel(context.Background())
			cancel()
			a.close(dead)
		}
	}
	// Graceful: stop taking requests; the deferred close stops the actors
	// (attempts end at a commit boundary or are resumed by the next owner).
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); fatal == nil {
		return err
	}
	return fatal
}

// untilStopping ends h's requests when stopping is done: the event
// stream and MCP's (its session's stream, a get_run waiting for its run)
// are requests that never go idle. A get_run cut short answers the run's
// status as it is.
func untilStopping(stopping context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

type api struct {
	a      *app
	ix     *runindex.Index
	tokens map[string]string
	// raw are the principals granted unredacted views.
	raw map[string]bool
	log *slog.Logger
}

// principalKey carries the caller's principal in a request's context, for
// what answers it (writeView's redaction).
type principalKey struct{}

// rawPrincipals parses --raw-principals: each must be a principal the node
// knows (one of CAIRN_TOKENS's, "default" of --token, or "local" without
// tokens), so a typo grants nothing silently and is named.
func rawPrincipals(list string, tokens map[string]string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, who := range tokens {
		known[who] = true
	}
	if len(tokens) == 0 {
		known["local"] = true
	}
	out := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !known[p] {
			return nil, fmt.Errorf("--raw-principals: %q is no principal of this node (its principals: %s)", p, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
		out[p] = true
	}
	return out, nil
}

// redactorFor is the redaction of principal's views: none for a principal
// granted raw values, the node's otherwise.
func (x *api) redactorFor(principal string) runtime.Redactor {
	if x.raw[principal] {
		return runtime.Secrets{}
	}
	return x.a.red
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
func (x *api) auth(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		principal := "local"
		if len(x.tokens) > 0 {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			principal = ""
			for tok, who := range x.tokens {
				if ok && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1 {
					principal = who
				}
			}
			if principal == "" {
				writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal)), principal)
	}
}

// owned returns the index entry of a run the principal owns; any other run
// is reported as not found (C10: IDs never establish authority).
func (x *api) owned(w http.ResponseWriter, r *http.Request, principal string) (runindex.Entry, bool) {
	id := r.PathValue("run")
	e, ok := x.ix.Get(id)
	if !ok {
		rec, err := x.a.node.Lookup(r.Context(), id)
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
func (x *api) start(w http.ResponseWriter, r *http.Request, principal string) {
	key := ""
	if keys, ok := r.Header[idempotencyHeader]; ok {
		if len(keys) != 1 {
			writeError(w, http.StatusBadRequest, "invalid", "%s header: given %d times, want once", idempotencyHeader, len(keys))
			return
		}
		if why := actors.IdempotencyKeyProblem(keys[0]); why != "" {
			writeError(w, http.StatusBadRequest, "invalid", "%s header: %s", idempotencyHeader, why)
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
	s, err := x.a.node.StartRun(r.Context(), actors.StartRequest{Owner: principal, Agent: req.Agent, Message: req.Message, IdempotencyKey: key})
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

// idempotencyHeader is POST /v1/runs's idempotency key (canonical form).
const idempotencyHeader = "Idempotency-Key"

// retryAfter is the Retry-After of a 503 from a node that cannot admit a
// run now, in seconds.
const retryAfter = "2"

func (x *api) nodeError(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, actors.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "%v", err)
	case errors.Is(err, actors.ErrInvalid):
		writeError(w, http.StatusBadRequest, "invalid", "%v", err)
	case errors.Is(err, actors.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", "%v", err)
	case errors.Is(err, actors.ErrBusy):
		writeError(w, http.StatusConflict, "busy", "%v", err)
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
func (x *api) list(w http.ResponseWriter, r *http.Request, principal string) {
	q, err := runQuery(r.URL.Query())
	if err == nil {
		q.Owner = principal
		var page projections.RunPage
		if page, err = x.ix.Query(q); err == nil {
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

func (x *api) show(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok {
		return
	}
	st, reply, errText, err := x.a.node.Status(r.Context(), e.SessionID, e.RunID)
	if x.nodeError(w, err) {
		return
	}
	kids, usage, err := runDetails(r.Context(), x.a.node, e)
	if x.nodeError(w, err) {
		return
	}
	status := runtime.RunStatus(st, reply)
	if status == runtime.StatusRunning && e.Status == runtime.StatusWaiting {
		// The log's records say running; the index, which reads the
		// commits, knows it is parked on its children.
		status = runtime.StatusWaiting
	}
	x.writeView(w, r, http.StatusOK, map[string]any{"run_id": e.RunID, "session_id": e.SessionID, "agent": e.Agent, "parent_run_id": e.ParentRunID,
		"status": status, "reply": reply, "error": errText, "children": kids, "usage": usage})
}

// runReader is what a run's view reads of the node (an *actors.Node).
type runReader interface {
	Status(ctx context.Context, sessionID, runID string) (runtime.CallStatus, *runtime.Reply, string, error)
	Usage(ctx context.Context, rootRunID string) (steps int, inputTokens, outputTokens int64, err error)
	Children(ctx context.Context, runID string) ([]events.Run, error)
}

// runDetails reads a run's children with their statuses and its root's
// usage. A read that fails fails the view: a view that showed no children
// or zero usage because NATS was out would state something false.
func runDetails(ctx context.Context, runs runReader, e runindex.Entry) (kids []map[string]any, usage map[string]int64, err error) {
	steps, in, out, err := runs.Usage(ctx, e.RootRunID)
	if err != nil {
		return nil, nil, fmt.Errorf("usage of %s: %w", e.RootRunID, err)
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
		kids = append(kids, map[string]any{"run_id": c.RunID, "session_id": c.SessionID, "agent": c.Agent, "call_id": c.ParentCallID, "status": runtime.RunStatus(cst, creply)})
	}
	return kids, map[string]int64{"steps": int64(steps), "input_tokens": in, "output_tokens": out}, nil
}

func (x *api) continueRun(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok {
		return
	}
	var req struct {
		Message string `json:"message"`
	}
	if !decodeBody(w, r, &req) || !x.admitting(w, r) {
		return
	}
	run, err := x.a.node.Continue(r.Context(), e.SessionID, req.Message)
	if x.nodeError(w, err) {
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"run_id": run, "session_id": e.SessionID})
}

func (x *api) cancel(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok {
		return
	}
	st, err := x.a.node.Cancel(r.Context(), e.SessionID, e.RunID, "cancelled through the API")
	if x.nodeError(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": e.RunID, "status": st})
}

// events streams a run's events from the log as server-sent events, in
// order, from its first event, redacted, until the run has finished.
func (x *api) events(w http.ResponseWriter, r *http.Request, principal string) {
	e, ok := x.owned(w, r, principal)
	if !ok {
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
	st, err := x.a.js.Stream(r.Context(), "CAIRN")
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
		body, oerr := x.a.keys.Open(msg.Data())
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
		fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", seq, typ, redactJSON(x.redactorFor(principal), body))
		flusher.Flush()
		if subj, err := events.ParseSubject(msg.Subject()); err == nil && subj.Kind.Final() {
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
			flusher.Flush()
			return
		}
	}
}
