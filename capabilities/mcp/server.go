package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/runtime/schema"
)

// Errors of a tool call that did not produce a result.
var (
	// ErrServerLost: the connection to the server failed during the call
	// (a stdio server exited, say). The call may or may not have taken
	// effect; the node is reconnecting (restarting a stdio server).
	ErrServerLost = errors.New("mcp: the server connection was lost")
	// ErrUnavailable: the server is not connected (it is being restarted),
	// or no longer offers the tool as it was bound at start.
	ErrUnavailable = errors.New("mcp: tool unavailable")
	// ErrRefused: the server answered the call with a protocol error
	// (unknown tool, invalid parameters): the tool did not run.
	ErrRefused = errors.New("mcp: the server refused the call")
)

// server is one configured MCP server: its current session, supervised,
// and the tools bound from it at start.
type server struct {
	cfg     ServerConfig
	opts    *Options
	log     *slog.Logger
	timeout time.Duration
	client  *sdk.Client

	mu    sync.Mutex
	sess  *sdk.ClientSession // nil while (re)connecting
	ready chan struct{}      // closed while sess is set
	proc  *os.Process        // the current stdio process, if any
	// bound is each allowed tool's gated schema hash and effect class,
	// fixed at start (nil before): the catalog (and every run's contract
	// hash, C9) is built from them.
	bound map[string]boundTool
	// relisting serializes relist.
	relisting sync.Mutex
	// unavailable says why a bound tool cannot be called now (absent:
	// callable): the server stopped offering it or changed its schema.
	unavailable map[string]string
	starts      int
	closed      bool

	stop context.CancelFunc
	done chan struct{}
}

func newServer(cfg ServerConfig, opts *Options) *server {
	timeout, _ := cfg.callTimeout() // validated
	s := &server{cfg: cfg, opts: opts, timeout: timeout, ready: make(chan struct{}),
		log: opts.Logger.With("mcp_server", cfg.Name), unavailable: map[string]string{}}
	s.client = sdk.NewClient(&sdk.Implementation{Name: "cairn", Version: "1"}, &sdk.ClientOptions{
		// No roots, sampling or elicitation: a run's tools get no
		// interactive or model access through the client (C41).
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(_ context.Context, req *sdk.ToolListChangedRequest) {
			// Not on the session's read loop: listing is a request whose
			// answer that loop has to deliver.
			go s.relist(req.Session, true)
		},
	})
	return s
}

// connect starts (stdio) or dials (HTTP) the server and initializes a
// session.
func (s *server) connect(ctx context.Context) (*sdk.ClientSession, *os.Process, error) {
	var t sdk.Transport
	var cmd *exec.Cmd
	if len(s.cfg.Command) > 0 {
		cmd = exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
		cmd.Dir = s.cfg.Dir
		cmd.Env = inheritedEnv()
		for k, v := range s.cfg.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		// A writer, not StderrPipe: Wait then waits for the last lines (a
		// crash's message) to be logged instead of closing the pipe under
		// the reader; WaitDelay bounds that when a grandchild keeps stderr.
		cmd.Stderr = &stderrLog{s: s}
		cmd.WaitDelay = 2 * time.Second
		t = &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		t = &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: &http.Client{Transport: headers{h: s.cfg.Headers}}}
	}
	sess, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return nil, nil, err
	}
	var proc *os.Process
	if cmd != nil {
		proc = cmd.Process
	}
	return sess, proc, nil
}

// inherited are the only variables of the node's environment a stdio
// server gets (besides its configured env): the node's own credentials
// (model API keys, say) never reach a third-party process. The same set as
// the official TypeScript SDK's default.
var inherited = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR"}

func inheritedEnv() []string {
	var env []string
	for _, k := range inherited {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// stderrLog logs a stdio server's stderr line by line, redacted. One
// goroutine of exec writes to it.
type stderrLog struct {
	s       *server
	partial []byte
}

// maxStderrLine cuts longer lines into pieces.
const maxStderrLine = 16 << 10

func (w *stderrLog) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 && len(w.partial) < maxStderrLine {
			return len(p), nil
		}
		next := i + 1 // after the newline
		if i < 0 {
			i, next = maxStderrLine, maxStderrLine
		}
		line := strings.TrimRight(string(w.partial[:i]), "\r")
		w.partial = w.partial[next:]
		w.s.log.Info("mcp server stderr", "line", w.s.opts.Redactor.Redact(line))
	}
}

// boundTool is what a tool was bound with at start.
type boundTool struct {
	hash   string // of the gated input schema
	effect string
}

// headers adds the configured headers to every request.
type headers struct{ h map[string]string }

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.h {
			r.Header.Set(k, v)
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// list returns every tool the session offers.
func list(ctx context.Context, sess *sdk.ClientSession) (map[string]*sdk.Tool, error) {
	out := map[string]*sdk.Tool{}
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		out[t.Name] = t
	}
	return out, nil
}

// gate converts and gates a listed tool's input schema.
func (s *server) gate(t *sdk.Tool) (json.RawMessage, string, []string, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, "", nil, &SchemaError{Server: s.cfg.Name, Tool: t.Name, Err: err}
	}
	out, conversions, err := gateToolSchema(s.cfg.Name, t.Name, raw)
	if err != nil {
		return nil, "", nil, err
	}
	compiled, err := schema.Compile(out)
	if err != nil { // gateToolSchema compiled it already
		return nil, "", nil, err
	}
	return out, compiled.Hash(), conversions, nil
}

// start connects for the first time and binds the allowed tools. Every
// failure here stops the node's start, naming the server and the tool.
func (s *server) start(ctx context.Context) ([]binding, error) {
	sess, proc, err := s.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcp: server %s: connect: %w", s.cfg.Name, err)
	}
	tools, err := list(ctx, sess)
	if err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("mcp: server %s: list tools: %w", s.cfg.Name, err)
	}
	var out []binding
	bound := map[string]boundTool{}
	for i, name := range s.cfg.Tools {
		t, ok := tools[name]
		if !ok {
			_ = sess.Close()
			return nil, fmt.Errorf("mcp: server %s: tools[%d]: the server does not offer %q (it offers: %s)", s.cfg.Name, i, name, strings.Join(names(tools), ", "))
		}
		in, hash, conversions, err := s.gate(t)
		if err != nil {
			_ = sess.Close()
			return nil, err
		}
		for _, c := range conversions {
			s.log.Info("mcp tool schema converted", "tool", name, "conversion", c)
		}
		bound[name] = boundTool{hash: hash, effect: effectOf(t.Annotations, s.cfg.Effects[name])}
		out = append(out, binding{srv: s, tool: name, schema: in, annotations: t.Annotations, description: describe(t)})
	}
	s.mu.Lock()
	s.bound = bound
	s.mu.Unlock()
	if !s.setSession(sess, proc) {
		return nil, fmt.Errorf("mcp: server %s: closed while starting", s.cfg.Name)
	}
	// A tools/list_changed that came while the tools were being bound was
	// ignored (nothing was bound yet): list once more.
	s.relist(sess, false)
	return out, nil
}

func names(tools map[string]*sdk.Tool) []string {
	out := make([]string, 0, len(tools))
	for n := range tools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func describe(t *sdk.Tool) string {
	d := strings.TrimSpace(t.Description)
	if d == "" {
		d = strings.TrimSpace(t.Title)
	}
	if a := t.Annotations; a != nil && !a.ReadOnlyHint && a.DestructiveHint != nil && *a.DestructiveHint {
		d += " (The server marks it destructive.)"
	}
	return d
}

// setSession makes sess current; false (and sess closed) after close.
func (s *server) setSession(sess *sdk.ClientSession, proc *os.Process) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = sess.Close()
		return false
	}
	s.sess, s.proc = sess, proc
	s.starts++
	close(s.ready)
	return true
}

// lose forgets a session that ended.
func (s *server) lose(sess *sdk.ClientSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == sess {
		s.sess, s.proc = nil, nil
		s.ready = make(chan struct{})
	}
}

// supervise keeps the server connected until ctx ends: when a session ends
// (a stdio server exited, an HTTP session failed) it reconnects with
// exponential backoff, relisting the tools each time.
func (s *server) supervise(ctx context.Context) {
	defer close(s.done)
	backoff := s.opts.MinBackoff
	for {
		s.mu.Lock()
		sess := s.sess
		s.mu.Unlock()
		if sess != nil {
			since := time.Now()
			err := sess.Wait()
			_ = sess.Close()
			s.lose(sess)
			if ctx.Err() != nil {
				return
			}
			if time.Since(since) > time.Minute {
				backoff = s.opts.MinBackoff // it ran a while: a fresh failure
			}
			s.log.Warn("mcp server connection ended; reconnecting", "err", err, "backoff", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
		cctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
		next, proc, err := s.connect(cctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("mcp server reconnect failed", "err", err, "backoff", backoff)
			continue
		}
		if !s.setSession(next, proc) {
			return
		}
		s.log.Info("mcp server connected", "starts", s.started())
		s.relist(next, true)
	}
}

func (s *server) started() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// relist lists the tools again (after tools/list_changed or a reconnect)
// and marks the bound tools that can no longer be called as bound: gone, or
// with a different input schema. Arguments are never checked against a
// schema the server no longer uses; a tool whose schema changed needs a
// node restart to be bound again (the catalog is part of every run's
// contract, C9).
func (s *server) relist(sess *sdk.ClientSession, notify bool) {
	// One at a time, each with a fresh listing: the last to finish saw the
	// latest tools.
	s.relisting.Lock()
	defer s.relisting.Unlock()
	s.mu.Lock()
	bound := s.bound
	s.mu.Unlock()
	if bound == nil {
		return // start binds from its own listing, then relists
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.StartTimeout)
	defer cancel()
	tools, err := list(ctx, sess)
	if err != nil {
		s.log.Warn("mcp list tools failed", "err", err)
		return
	}
	unavailable := map[string]string{}
	for _, name := range s.cfg.Tools {
		t, ok := tools[name]
		if !ok {
			unavailable[name] = "the server no longer offers it"
			continue
		}
		_, hash, _, err := s.gate(t)
		switch {
		case err != nil:
			unavailable[name] = "its new input schema is refused: " + err.Error()
		case hash != bound[name].hash:
			unavailable[name] = "it changed its input schema since the node started; a node restart binds the new one"
		case effectOf(t.Annotations, s.cfg.Effects[name]) != bound[name].effect:
			// The model was told the old class (and is told it again in
			// unknown-effect notices): never let it repeat a call on a
			// promise the server withdrew.
			unavailable[name] = fmt.Sprintf("its annotations now make it %s, not %s as bound; a node restart binds it anew",
				effectOf(t.Annotations, s.cfg.Effects[name]), bound[name].effect)
		}
	}
	s.mu.Lock()
	s.unavailable = unavailable
	s.mu.Unlock()
	for name, why := range unavailable {
		s.log.Warn("mcp tool unavailable", "tool", name, "reason", why)
	}
	if notify && s.opts.listed != nil {
		s.opts.listed(s.cfg.Name)
	}
}

// session waits until the server is connected (bounded by ctx) and the
// tool is callable.
func (s *server) session(ctx context.Context, tool string) (*sdk.ClientSession, error) {
	for {
		s.mu.Lock()
		sess, ready, why := s.sess, s.ready, s.unavailable[tool]
		s.mu.Unlock()
		if why != "" {
			return nil, fmt.Errorf("%w: server %s: tool %s: %s", ErrUnavailable, s.cfg.Name, tool, why)
		}
		if sess != nil {
			return sess, nil
		}
		select {
		case <-ready:
		case <-s.done:
			return nil, fmt.Errorf("%w: server %s is shut down", ErrUnavailable, s.cfg.Name)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: server %s is not connected (restarting): %v", ErrUnavailable, s.cfg.Name, ctx.Err())
		}
	}
}

// call calls a tool. Its errors wrap ErrUnavailable, ErrRefused or
// ErrServerLost, or are the context's.
func (s *server) call(ctx context.Context, tool string, args json.RawMessage) (*sdk.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sess, err := s.session(ctx, tool)
	if err != nil {
		return nil, err
	}
	res, err := sess.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err == nil {
		return res, nil
	}
	var rpc *jsonrpc.Error
	switch {
	case errors.As(err, &rpc):
		return nil, fmt.Errorf("%w: server %s: tool %s: %s", ErrRefused, s.cfg.Name, tool, rpc.Message)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("server %s: tool %s: no answer in time; the call may or may not have taken effect: %w", s.cfg.Name, tool, ctx.Err())
	}
	// Forget the session now, not when the supervisor notices: the next
	// call waits for the restarted server instead of failing on this one.
	// Closing it ends the supervisor's wait on it (an HTTP session that
	// failed may not end by itself), which then reconnects.
	s.lose(sess)
	go sess.Close()
	return nil, fmt.Errorf("%w: server %s: tool %s: %v; the call may or may not have taken effect", ErrServerLost, s.cfg.Name, tool, err)
}

// pid is the current stdio process's ID (0 when none), for tests.
func (s *server) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}

func (s *server) close() {
	if s.stop != nil {
		s.stop()
	}
	s.mu.Lock()
	sess := s.sess
	s.closed = true
	s.mu.Unlock()
	if sess != nil {
		_ = sess.Close()
	}
	if s.done != nil {
		<-s.done
	}
}
