// Package mcpserver is Cairn as an MCP server: `node mcp` on stdio, and
// POST/GET /mcp (streamable HTTP) on `node serve`, behind the API's bearer
// tokens.
//
// An MCP client drives durable runs with these tools:
//
//	list_agents                  the deployed agents, with their input schemas
//	start_run {agent, message, idempotency_key?}   start a root run; returns its IDs and status
//	                             (a retry with the same key returns the same run)
//	get_run {run_id, wait_seconds?}   status, reply (output or needs_input question) or error;
//	                             waits up to wait_seconds (at most 300) for the run to finish
//	answer {run_id, message}     answer a run's needs_input question: a new run in its session
//	cancel_run {run_id}          cancel a run
//
// Runs belong to the principal that started them (the bearer token's; on
// stdio and on a loopback node without tokens, "local"): every tool checks
// the owner in the run's durable record (C10), and another principal's run
// is reported as not found.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/actors"
	"github.com/cairn-agents/cairn/api"
	"github.com/cairn-agents/cairn/projections/runindex"
	"github.com/cairn-agents/cairn/runtime"
	cjs "github.com/cairn-agents/cairn/store/jetstream"
)

// Config is what the MCP server serves.
type Config struct {
	// Node runs the runs; required.
	Node *actors.Node
	// Agents lists the deployed agents; required.
	Agents func() []actors.Agent
	// Redactor redacts every reply and error: MCP clients are often
	// agents themselves, and no principal gets raw values here. Nil
	// redacts nothing.
	Redactor runtime.Redactor
	// Index, when given, tells a run parked on its children (waiting)
	// from one that runs; without it get_run says running for both.
	Index *runindex.Index
	// Logger; nil discards.
	Logger *slog.Logger
}

// principal is the caller's principal: the token's user on HTTP, local
// otherwise.
func principal(extra *sdk.RequestExtra) string {
	if extra != nil && extra.TokenInfo != nil && extra.TokenInfo.UserID != "" {
		return extra.TokenInfo.UserID
	}
	return "local"
}

type (
	startIn struct {
		Agent   string `json:"agent" jsonschema:"the slug of a deployed agent (see list_agents)"`
		Message string `json:"message" jsonschema:"the task, as the user's message"`
		// A pointer: a key given empty is an error, not the absence of one.
		IdempotencyKey *string `json:"idempotency_key,omitempty" jsonschema:"makes the start safe to retry: a start with a key used before returns the run it started (same agent and message), or fails naming the key (other ones); 1-255 printable ASCII characters"`
	}
	runIn struct {
		RunID string `json:"run_id" jsonschema:"the run's ID, as start_run or answer returned it"`
	}
	getIn struct {
		RunID       string `json:"run_id" jsonschema:"the run's ID"`
		WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (0 to 300) for the run to finish"`
	}
	answerIn struct {
		RunID   string `json:"run_id" jsonschema:"the run that asked (its reply is needs_input)"`
		Message string `json:"message" jsonschema:"the answer to its question"`
	}
	runOut struct {
		RunID     string    `json:"run_id"`
		SessionID string    `json:"session_id"`
		Agent     string    `json:"agent,omitempty"`
		Status    string    `json:"status"`
		Reply     *replyOut `json:"reply,omitempty"`
		Error     string    `json:"error,omitempty"`
	}
	replyOut struct {
		Type     string `json:"type" jsonschema:"output or needs_input"`
		Output   any    `json:"output,omitempty"`
		Question string `json:"question,omitempty"`
	}
	agentsOut struct {
		Agents []agentOut `json:"agents"`
	}
	agentOut struct {
		Slug        string `json:"slug"`
		Description string `json:"description,omitempty"`
		InputSchema any    `json:"input_schema,omitempty"`
	}
)

// maxWait bounds get_run's wait.
const maxWait = 300 * time.Second

// New checks cfg and returns the MCP server over a running node.
func New(cfg Config) (*sdk.Server, error) {
	switch {
	case cfg.Node == nil:
		return nil, errors.New("mcpserver: Config.Node is required")
	case cfg.Agents == nil:
		return nil, errors.New("mcpserver: Config.Agents is required")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = logger
	s := sdk.NewServer(&sdk.Implementation{Name: "cairn", Title: "Cairn durable agent runs", Version: "1"}, &sdk.ServerOptions{
		Instructions: "Start a durable agent run with start_run, follow it with get_run (wait_seconds long-polls), answer a needs_input reply with answer, stop it with cancel_run.",
		Logger:       logger,
	})
	m := &tools{cfg: cfg, log: logger}
	yes, no := true, false
	sdk.AddTool(s, &sdk.Tool{Name: "list_agents", Description: "List the agents this node runs.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, m.listAgents)
	sdk.AddTool(s, &sdk.Tool{Name: "start_run", Description: "Start a durable run of an agent with a task. Returns its run_id at once; follow it with get_run.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes}}, m.start)
	sdk.AddTool(s, &sdk.Tool{Name: "get_run", Description: "A run's status and, once it finished, its reply (output, or a needs_input question) or error. wait_seconds waits for it to finish.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, m.get)
	sdk.AddTool(s, &sdk.Tool{Name: "answer", Description: "Answer the question of a run that replied needs_input: starts a new run in its session, which sees the whole conversation. Returns the new run.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes}}, m.answer)
	sdk.AddTool(s, &sdk.Tool{Name: "cancel_run", Description: "Cancel a run.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true}}, m.cancel)
	return s, nil
}

type tools struct {
	cfg Config
	log *slog.Logger
}

// fail turns a node error into a tool error the client may see: the
// node's own sentinels keep their text, anything else is logged and
// reported without detail.
func (m *tools) fail(err error) error {
	switch {
	case errors.Is(err, actors.ErrNotFound), errors.Is(err, actors.ErrInvalid), errors.Is(err, actors.ErrTooLarge), errors.Is(err, actors.ErrBusy), errors.Is(err, errNoRun),
		errors.Is(err, actors.ErrIdempotencyConflict), errors.Is(err, actors.ErrUnavailable), errors.Is(err, actors.ErrPurged):
		return err
	case cjs.Unavailable(err): // NATS out, JetStream refusing writes: the client may retry
		return fmt.Errorf("unavailable: NATS cannot serve the request now; retry later: %w", err)
	}
	m.log.Error("mcp tool", "err", err)
	return errors.New("the node could not complete the request")
}

var errNoRun = errors.New("no such run")

// owned returns the record of a run the principal owns (C10).
func (m *tools) owned(ctx context.Context, principal, runID string) (sessionID, agent string, err error) {
	if runID == "" {
		return "", "", fmt.Errorf("%w: run_id: is required", actors.ErrInvalid)
	}
	rec, err := m.cfg.Node.Lookup(ctx, runID)
	if err != nil || rec == nil {
		// A run whose session was purged has no record any more: the
		// index keeps its owner, and status says purged.
		if m.cfg.Index != nil {
			if e, ok := m.cfg.Index.Get(runID); ok && e.Status == runtime.StatusPurged && e.Owner == principal {
				return e.SessionID, e.Agent, nil
			}
		}
		return "", "", fmt.Errorf("%w: %q", errNoRun, runID)
	}
	if rec.Owner != principal {
		return "", "", fmt.Errorf("%w: %q", errNoRun, runID)
	}
	return rec.SessionID, rec.Agent, nil
}

func (m *tools) status(ctx context.Context, sessionID, runID, agent string) (runOut, error) {
	st, reply, errText, err := m.cfg.Node.Status(ctx, sessionID, runID)
	if err != nil {
		return runOut{}, err
	}
	// Redacted like every view: the reply holds what the run saw (a
	// model's echo of a secret included). MCP clients are often agents
	// themselves; no principal gets raw values here.
	var red runtime.Redactor = runtime.Secrets{}
	if m.cfg.Redactor != nil {
		red = m.cfg.Redactor
	}
	status := runtime.RunStatus(st, reply)
	if status == runtime.StatusRunning && m.cfg.Index != nil {
		// The log's records say running; the index, which reads the
		// commits, knows a run parked on its children (as the API says).
		if e, ok := m.cfg.Index.Get(runID); ok && e.Status == runtime.StatusWaiting {
			status = runtime.StatusWaiting
		}
	}
	out := runOut{RunID: runID, SessionID: sessionID, Agent: agent, Status: string(status), Error: red.Redact(errText)}
	if reply != nil {
		out.Reply = &replyOut{Type: string(reply.Type), Question: red.Redact(reply.Question)}
		if len(reply.Output) > 0 {
			dec := json.NewDecoder(bytes.NewReader(api.RedactJSON(red, reply.Output)))
			dec.UseNumber() // numbers as the model wrote them
			var v any
			if err := dec.Decode(&v); err != nil {
				return runOut{}, err
			}
			out.Reply.Output = v
		}
	}
	return out, nil
}

func (m *tools) listAgents(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, agentsOut, error) {
	out := agentsOut{Agents: []agentOut{}}
	for _, a := range m.cfg.Agents() {
		ag := agentOut{Slug: a.Definition.Slug, Description: a.Definition.Description}
		if len(a.Definition.InputSchema) > 0 {
			var v any
			if json.Unmarshal(a.Definition.InputSchema, &v) == nil {
				ag.InputSchema = v
			}
		}
		out.Agents = append(out.Agents, ag)
	}
	sort.Slice(out.Agents, func(i, j int) bool { return out.Agents[i].Slug < out.Agents[j].Slug })
	return nil, out, nil
}

func (m *tools) start(ctx context.Context, req *sdk.CallToolRequest, in startIn) (*sdk.CallToolResult, runOut, error) {
	key := ""
	if in.IdempotencyKey != nil {
		if why := actors.IdempotencyKeyProblem(*in.IdempotencyKey); why != "" {
			return nil, runOut{}, fmt.Errorf("%w: idempotency_key: %s", actors.ErrInvalid, why)
		}
		key = *in.IdempotencyKey
	}
	if in.Agent == "" {
		return nil, runOut{}, fmt.Errorf("%w: agent: is required", actors.ErrInvalid)
	}
	s, err := m.cfg.Node.StartRun(ctx, actors.StartRequest{Owner: principal(req.Extra), Agent: in.Agent, Message: in.Message, IdempotencyKey: key})
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	out, err := m.status(ctx, s.SessionID, s.RunID, in.Agent)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	return nil, out, nil
}

func (m *tools) get(ctx context.Context, req *sdk.CallToolRequest, in getIn) (*sdk.CallToolResult, runOut, error) {
	if in.WaitSeconds < 0 || time.Duration(in.WaitSeconds)*time.Second > maxWait {
		return nil, runOut{}, fmt.Errorf("%w: wait_seconds: %d is not between 0 and %d", actors.ErrInvalid, in.WaitSeconds, int(maxWait.Seconds()))
	}
	sess, agent, err := m.owned(ctx, principal(req.Extra), in.RunID)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	if in.WaitSeconds > 0 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(in.WaitSeconds)*time.Second)
		// Result returns when the run finished, or its error, or the
		// wait's end: in every case the status below is what the log says.
		_, _, _ = m.cfg.Node.Result(wctx, sess, in.RunID)
		cancel()
	}
	out, err := m.status(ctx, sess, in.RunID, agent)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	return nil, out, nil
}

func (m *tools) answer(ctx context.Context, req *sdk.CallToolRequest, in answerIn) (*sdk.CallToolResult, runOut, error) {
	sess, agent, err := m.owned(ctx, principal(req.Extra), in.RunID)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	st, reply, _, err := m.cfg.Node.Status(ctx, sess, in.RunID)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	if st != runtime.StatusCompleted || reply == nil || reply.Type != runtime.ReplyNeedsInput {
		return nil, runOut{}, fmt.Errorf("%w: run %s did not ask a question (status %s)", actors.ErrInvalid, in.RunID, st)
	}
	run, err := m.cfg.Node.Continue(ctx, sess, in.Message)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	out, err := m.status(ctx, sess, run, agent)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	return nil, out, nil
}

func (m *tools) cancel(ctx context.Context, req *sdk.CallToolRequest, in runIn) (*sdk.CallToolResult, runOut, error) {
	sess, agent, err := m.owned(ctx, principal(req.Extra), in.RunID)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	if _, err := m.cfg.Node.Cancel(ctx, sess, in.RunID, "cancelled through MCP"); err != nil {
		return nil, runOut{}, m.fail(err)
	}
	out, err := m.status(ctx, sess, in.RunID, agent)
	if err != nil {
		return nil, runOut{}, m.fail(err)
	}
	return nil, out, nil
}

// Handler is the streamable-HTTP endpoint of `node serve`. With tokens
// configured, every request needs one (the API's tokens and principals),
// and a session stays with the principal that opened it (the SDK refuses a
// session ID presented with another principal's token).
func Handler(srv *sdk.Server, a *api.Server, logger *slog.Logger) http.Handler {
	// Idle sessions end after half an hour (a client that went away
	// leaves nothing behind); a client that comes back starts a new one.
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{Logger: logger, SessionTimeout: 30 * time.Minute})
	if !a.Authenticates() {
		return h // loopback only (serve refuses otherwise): the local principal
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		principal, ok := a.Principal(token)
		if !ok {
			return nil, fmt.Errorf("%w: unknown token", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: principal}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}
