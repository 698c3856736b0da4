package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/projections"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// Setup is what a re-drive needs that the log does not hold: the run's
// contract as the host gave it. A contract that differs from the logged
// one fails at resume (C9), which Redrive reports as an error.
type Setup struct {
	Definition   runtime.AgentDefinition
	Subagents    []runtime.AgentDefinition
	Capabilities []runtime.Capability
	Limits       runtime.ModelLimits
	Budget       runtime.Budget
	// Redactor as the host ran it; nil means none.
	Redactor runtime.Redactor
	// AcceptContractChange re-drives a log written under another contract
	// (another definition version, or an older build whose contract hash
	// covered less): the logged checkpoints' contract hash is replaced by
	// this setup's before they are loaded or compared, and the report says
	// so. Everything else must still match.
	AcceptContractChange bool
}

// Divergence is where a re-driven write differs from the logged one.
type Divergence struct {
	// Attempt counts the re-drive's attempts from 1; Write is the index
	// of the write in it.
	Attempt  int    `json:"attempt"`
	Write    int    `json:"write"`
	Revision int64  `json:"revision,omitempty"`
	Reason   string `json:"reason"`
	// Fields are the top-level checkpoint fields that differ.
	Fields   []string `json:"fields,omitempty"`
	Logged   string   `json:"logged,omitempty"`
	Redriven string   `json:"redriven,omitempty"`
}

// Report is the outcome of a re-drive.
type Report struct {
	RunID string `json:"run_id"`
	From  int64  `json:"from"`
	// Attempts are the attempts re-driven: one per lease the log has
	// after From.
	Attempts int `json:"attempts"`
	// Reproduced counts the logged writes (commits and compactions) the
	// re-drive made again identically.
	Reproduced int `json:"reproduced"`
	// Logged counts the logged writes after From.
	Logged int `json:"logged"`
	// Divergence is the first difference; the re-drive stops there.
	Divergence *Divergence `json:"divergence,omitempty"`
	// ContractChanged names the logged and the re-driven contract hash
	// when they differ and Setup.AcceptContractChange let it pass.
	ContractChanged string `json:"contract_changed,omitempty"`
	// Errors are how each attempt ended (nil: completed).
	Errors []string `json:"errors,omitempty"`
}

// Exact reports whether every logged write was reproduced, nothing else.
func (r *Report) Exact() bool { return r.Divergence == nil && r.Reproduced == r.Logged }

// write is one logged write of the run: a commit or a compaction.
type write struct {
	seq        uint64
	commit     *runtime.Checkpoint
	compaction *session.Compaction
}

// errAttemptEnded stops a re-driven attempt where the logged attempt
// stopped: the original wrote nothing more before its next lease.
var errAttemptEnded = errors.New("replay: the logged attempt ended here")

// errDiverged stops the re-drive at the first difference.
var errDiverged = errors.New("replay: diverged from the log")

// attempts splits the run's writes after seq into attempts, one per lease.
func (h *History) attempts(after uint64) [][]write {
	var out [][]write
	cur := -1
	for _, e := range h.Events {
		if e.Seq <= after {
			continue
		}
		switch {
		case e.Type == events.LeaseAcquired && e.RunID == h.RunID:
			out = append(out, nil)
			cur = len(out) - 1
		case e.Type == events.CheckpointCommitted && e.RunID == h.RunID:
			cp, err := e.Checkpoint()
			if err != nil {
				continue
			}
			if cur < 0 {
				out, cur = append(out, nil), 0
			}
			out[cur] = append(out[cur], write{seq: e.Seq, commit: cp})
		case e.Type == events.WindowCompacted:
			var c events.Compaction
			if e.Payload(&c) != nil || c.RunID != h.RunID {
				continue
			}
			if cur < 0 {
				out, cur = append(out, nil), 0
			}
			out[cur] = append(out[cur], write{seq: e.Seq, compaction: &c.Compaction})
		}
	}
	return out
}

// Redrive runs the loop again from revision from (0: from the start)
// against the log: a recorded model serves the logged responses and
// summaries, a recorded controller and executor serve the logged outcomes
// of every call, no provider, capability or child is touched, and nothing
// is written to the log. It makes one attempt per logged attempt, each
// ending where the logged one ended, so crashes and recoveries replay as
// they happened, and compares every write with the logged one. It stops at
// the first difference.
func Redrive(ctx context.Context, h *History, from int64, s Setup) (*Report, error) {
	rep := &Report{RunID: h.RunID, From: from}
	if s.AcceptContractChange && len(h.Commits) > 0 {
		hash, err := ContractHash(s)
		if err != nil {
			return nil, err
		}
		if old := h.Commits[0].Checkpoint.ContractHash; old != hash {
			rep.ContractChanged = fmt.Sprintf("logged %.12s, now %.12s", old, hash)
			h = h.withContract(hash)
		}
	}
	st := &store{h: h}
	var after uint64
	if from > 0 {
		c, err := h.Revision(from)
		if err != nil {
			return nil, err
		}
		after = c.Seq
		st.setCheckpoint(&c.Checkpoint)
		st.window, _, _ = h.windowAt(c.Seq)
	} else {
		// The window before the run's first commit: a continuation
		// starts from its session's window.
		first := uint64(0)
		for _, e := range h.Events {
			if e.RunID == h.RunID {
				first = e.Seq
				break
			}
		}
		if first > 0 {
			st.window, _, _ = h.windowAt(first - 1)
		}
	}
	plan := h.attempts(after)
	for _, a := range plan {
		rep.Logged += len(a)
	}
	results := h.results()
	message := h.Run.Message
	if len(h.Commits) > 0 && len(h.Commits[0].Checkpoint.Append) > 0 {
		message = h.Commits[0].Checkpoint.Append[0].Text()
	}
	key := ""
	if len(h.Commits) > 0 {
		key = h.Commits[0].Checkpoint.RunKey
	}
	red := s.Redactor
	if red == nil {
		red = runtime.Secrets(nil)
	}
	for i, writes := range plan {
		st.begin(i+1, writes)
		in := runtime.Input{
			Definition: s.Definition, Subagents: s.Subagents, Capabilities: s.Capabilities,
			ModelLimits: s.Limits, Budget: s.Budget, Redactor: red,
			Model:           &recordedModel{h: h, st: st},
			Store:           st,
			Backend:         noBackend{},
			ExecutorFactory: recordedExecutors{st: st, results: results},
			Controller:      &recordedController{st: st, results: results},
			Sink:            runtime.SinkFunc(func(context.Context, runtime.SinkEvent) {}),
			Message:         message,
			IDs:             fixedID(key),
		}
		_, err := runtime.Run(ctx, in)
		rep.Attempts++
		rep.Reproduced += st.matched
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
		} else {
			rep.Errors = append(rep.Errors, "")
		}
		if st.div != nil {
			rep.Divergence = st.div
			return rep, nil
		}
		if errors.Is(err, runtime.ErrContractMismatch) || errors.Is(err, runtime.ErrInvalidInput) {
			return rep, fmt.Errorf("replay: re-drive %s: %w", h.RunID, err)
		}
		if left := len(st.queue); left > 0 {
			w := st.queue[0]
			rep.Divergence = &Divergence{Attempt: i + 1, Write: st.index, Revision: w.revision(),
				Reason: fmt.Sprintf("the re-driven attempt stopped (%v) before %d logged writes", err, left), Logged: w.json()}
			return rep, nil
		}
	}
	return rep, nil
}

// withContract is a copy of h whose checkpoints carry contract hash.
func (h *History) withContract(hash string) *History {
	c := *h
	c.Commits = make([]Commit, len(h.Commits))
	for i, cm := range h.Commits {
		cm.Checkpoint.ContractHash = hash
		c.Commits[i] = cm
	}
	c.Events = make([]projections.Event, len(h.Events))
	for i, e := range h.Events {
		if e.Type == events.CheckpointCommitted {
			if cp, err := e.Checkpoint(); err == nil {
				cp.ContractHash = hash
				if b, err := json.Marshal(events.Checkpoint{Checkpoint: *cp}); err == nil {
					e.Data = b
				}
			}
		}
		c.Events[i] = e
	}
	return &c
}

func (w write) revision() int64 {
	if w.commit != nil {
		return w.commit.Revision
	}
	return 0
}

func (w write) json() string {
	var b []byte
	if w.commit != nil {
		b, _ = json.Marshal(w.commit)
	} else {
		b, _ = json.Marshal(w.compaction)
	}
	return string(b)
}

type fixedID string

func (f fixedID) NewID() string { return string(f) }

// results are the logged tool results of the run by call ID.
func (h *History) results() map[string]model.ToolResult {
	out := map[string]model.ToolResult{}
	for _, c := range h.Commits {
		for _, m := range c.Checkpoint.Append {
			for _, p := range m.Parts {
				if p.ToolResult != nil {
					out[p.ToolResult.CallID] = *p.ToolResult
				}
			}
		}
	}
	return out
}

// store is the re-drive's runtime.Store: it holds the reconstructed state
// and accepts a write only if it equals the next logged one.
type store struct {
	h *History

	mu      sync.Mutex
	cp      []byte
	step    int
	window  []model.Message
	attempt int
	queue   []write
	index   int
	matched int
	div     *Divergence
}

var _ runtime.Store = (*store)(nil)

func (s *store) setCheckpoint(cp *runtime.Checkpoint) {
	c := *cp
	c.Append = nil
	s.cp, _ = json.Marshal(c)
	s.step = cp.Step
}

func (s *store) begin(attempt int, writes []write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempt, s.queue, s.index, s.matched = attempt, writes, 0, 0
}

// pending is how many logged writes the current attempt has left.
func (s *store) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

func (s *store) next() (write, bool) {
	if len(s.queue) == 0 {
		return write{}, false
	}
	return s.queue[0], true
}

func (s *store) LoadCheckpoint(context.Context) (*runtime.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cp == nil {
		return nil, nil
	}
	var cp runtime.Checkpoint
	if err := json.Unmarshal(s.cp, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

func (s *store) Load(context.Context) ([]model.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]model.Message(nil), s.window...), nil
}

func (s *store) diverge(reason string, logged, redriven []byte, rev int64, fields []string) error {
	s.div = &Divergence{Attempt: s.attempt, Write: s.index, Revision: rev, Reason: reason, Fields: fields, Logged: string(logged), Redriven: string(redriven)}
	return runtime.Fatal(errDiverged)
}

func (s *store) SaveCheckpoint(_ context.Context, cp *runtime.Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	w, ok := s.next()
	switch {
	case s.div != nil:
		return runtime.Fatal(errDiverged)
	case !ok:
		return errAttemptEnded
	case w.commit == nil:
		return s.diverge("a commit where the log has a compaction", []byte(w.json()), got, cp.Revision, nil)
	}
	want, _ := json.Marshal(w.commit)
	if !bytes.Equal(got, want) {
		return s.diverge("the commit differs", want, got, cp.Revision, fieldsDiffer(want, got))
	}
	s.queue, s.index, s.matched = s.queue[1:], s.index+1, s.matched+1
	s.setCheckpoint(cp)
	s.window = append(s.window, cp.Append...)
	return nil
}

func (s *store) Compact(_ context.Context, c session.Compaction) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, _ := json.Marshal(c)
	w, ok := s.next()
	switch {
	case s.div != nil:
		return runtime.Fatal(errDiverged)
	case !ok:
		return errAttemptEnded
	case w.compaction == nil:
		return s.diverge("a compaction where the log has a commit", []byte(w.json()), got, w.revision(), nil)
	}
	want, _ := json.Marshal(w.compaction)
	if !bytes.Equal(got, want) {
		return s.diverge("the compaction differs", want, got, 0, fieldsDiffer(want, got))
	}
	s.queue, s.index, s.matched = s.queue[1:], s.index+1, s.matched+1
	s.window = append([]model.Message(nil), c.Window...)
	return nil
}

// fieldsDiffer names the top-level JSON fields that differ.
func fieldsDiffer(a, b []byte) []string {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return nil
	}
	var out []string
	for _, k := range sortedKeys(ma, mb) {
		if !bytes.Equal(ma[k], mb[k]) {
			out = append(out, k)
		}
	}
	return out
}

// recordedModel serves the logged model responses: a step request gets
// the response committed for the next step, a compaction request the
// summary the logged compaction holds.
type recordedModel struct {
	h  *History
	st *store
}

// ErrNotRecorded is returned by the recorded model, controller and
// executor when the log has no answer for a request: the run went where
// the logged one did not.
var ErrNotRecorded = errors.New("replay: not in the log")

func (m *recordedModel) Generate(ctx context.Context, req model.Request) (*model.Response, error) {
	if req.Purpose == model.PurposeCompaction {
		m.st.mu.Lock()
		w, ok := m.st.next()
		m.st.mu.Unlock()
		if !ok || w.compaction == nil || len(w.compaction.Window) == 0 {
			return nil, fmt.Errorf("%w: a compaction summary here", ErrNotRecorded)
		}
		text := w.compaction.Window[0].Text()
		const head = "\n\n## Summary of the work so far\n"
		i := strings.LastIndex(text, head)
		if i < 0 {
			return nil, fmt.Errorf("%w: the logged compaction has no summary", ErrNotRecorded)
		}
		return &model.Response{Message: model.TextMessage("", model.RoleAssistant, text[i+len(head):])}, nil
	}
	m.st.mu.Lock()
	step := m.st.step + 1
	m.st.mu.Unlock()
	for _, c := range m.h.Commits {
		cp := c.Checkpoint
		if cp.Step == step && len(cp.Append) > 0 && cp.Append[0].ID == cp.ResponseID && cp.Append[0].Role == model.RoleAssistant {
			// The failed requests the response cost, as the provider's
			// retry loop reported them: the commit holds them.
			for _, f := range cp.ModelFailures {
				model.ReportFailure(ctx, f)
			}
			msg := cp.Append[0]
			msg.ID = ""
			resp := &model.Response{Message: msg}
			if cp.Usage != nil {
				resp.Usage = *cp.Usage
			}
			return resp, nil
		}
	}
	return nil, fmt.Errorf("%w: the response of step %d", ErrNotRecorded, step)
}

// recordedController answers every control call with its logged result.
type recordedController struct {
	st      *store
	results map[string]model.ToolResult
}

// stop ends the attempt without a write where the logged attempt ended.
func (c *recordedController) ended() error {
	if c.st.pending() == 0 {
		return runtime.Fatal(errAttemptEnded)
	}
	return nil
}

// logged decodes the logged result of a call into v, or returns the error
// the controller gave then.
func (c *recordedController) logged(callID, tool string, v any) error {
	if err := c.ended(); err != nil {
		return err
	}
	r, ok := c.results[callID]
	if !ok {
		return runtime.Fatal(fmt.Errorf("%w: the result of %s %s", ErrNotRecorded, tool, callID))
	}
	if msg, failed := strings.CutPrefix(r.Content, tool+" failed: "); failed && r.IsError {
		return errors.New(msg)
	}
	if err := json.Unmarshal([]byte(r.Content), v); err != nil {
		return runtime.Fatal(fmt.Errorf("%w: %s %s: the logged result is not a %T: %v", ErrNotRecorded, tool, callID, v, err))
	}
	return nil
}

func (c *recordedController) BeforeModel(context.Context) error { return c.ended() }

func (c *recordedController) Spawn(_ context.Context, id, _ string, _ []byte) (runtime.AgentRunInfo, error) {
	var info runtime.AgentRunInfo
	// The tool name as the model saw it (the journal has it).
	err := c.logged(id, c.current().Name, &info)
	return info, err
}

func (c *recordedController) Continue(_ context.Context, id, _, _ string) (runtime.AgentRunInfo, error) {
	var info runtime.AgentRunInfo
	err := c.logged(id, runtime.ToolContinue, &info)
	return info, err
}

// Get and Cancel do not carry the tool-call ID; the call dispatching is the
// one the checkpoint names.
func (c *recordedController) current() runtime.CallRecord {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	var cp runtime.Checkpoint
	_ = json.Unmarshal(c.st.cp, &cp)
	for _, r := range cp.Calls {
		if r.State == runtime.CallDispatching {
			return r
		}
	}
	return runtime.CallRecord{}
}

func (c *recordedController) Get(context.Context, []string) ([]runtime.CallInfo, error) {
	var out []runtime.CallInfo
	err := c.logged(c.current().ID, runtime.ToolGet, &out)
	return out, err
}

func (c *recordedController) Cancel(context.Context, []string) ([]runtime.CancelInfo, error) {
	var out []runtime.CancelInfo
	err := c.logged(c.current().ID, runtime.ToolCancel, &out)
	return out, err
}

func (c *recordedController) Wait(_ context.Context, id string, _ runtime.WaitRequest) (runtime.WaitResult, error) {
	var out runtime.WaitResult
	err := c.logged(id, runtime.ToolWait, &out)
	return out, err
}

func (c *recordedController) Complete(context.Context, runtime.Reply) error {
	if err := c.ended(); err != nil {
		return err
	}
	id := c.current().ID
	r, ok := c.results[id]
	if !ok {
		return runtime.Fatal(fmt.Errorf("%w: the result of complete %s", ErrNotRecorded, id))
	}
	if msg, rejected := strings.CutPrefix(r.Content, "complete was rejected: "); rejected && r.IsError {
		return errors.New(msg)
	}
	return nil
}

// recordedExecutors run no JavaScript: each script's outcome is rebuilt
// from its logged tool result.
type recordedExecutors struct {
	st      *store
	results map[string]model.ToolResult
}

func (f recordedExecutors) NewExecutor(context.Context, jstool.Config) (jstool.Executor, error) {
	return recordedExecutor(f), nil
}

type recordedExecutor recordedExecutors

func (e recordedExecutor) Close() error { return nil }

func (e recordedExecutor) Execute(_ context.Context, s jstool.Script) (jstool.Outcome, error) {
	if e.st.pending() == 0 {
		return jstool.Outcome{}, runtime.Fatal(errAttemptEnded)
	}
	r, ok := e.results[s.CallID]
	if !ok {
		return jstool.Outcome{}, runtime.Fatal(fmt.Errorf("%w: the result of run_js %s", ErrNotRecorded, s.CallID))
	}
	o, ok := OutcomeOf(r)
	if !ok {
		return jstool.Outcome{}, runtime.Fatal(fmt.Errorf("%w: the logged result of run_js %s cannot be rebuilt as an outcome", ErrNotRecorded, s.CallID))
	}
	return o, nil
}

// OutcomeOf rebuilds the script outcome a logged run_js result was
// formatted from, when the result says everything the outcome held: a
// completed script (value, console, attachments) or a failure without
// capability callbacks. A failure listing callbacks is not rebuilt: the
// log keeps only their argument digests, not the calls.
func OutcomeOf(r model.ToolResult) (jstool.Outcome, bool) {
	try := func(o jstool.Outcome) bool {
		f := jstool.Format(o, nil)
		return f.Content == r.Content && f.IsError == r.IsError
	}
	var body struct {
		Result      json.RawMessage  `json:"result"`
		Logs        []jstool.LogLine `json:"logs"`
		LogsDropped int              `json:"logs_dropped"`
	}
	if json.Unmarshal([]byte(r.Content), &body) == nil {
		o := jstool.Outcome{Value: body.Result, Logs: body.Logs, LogsDropped: body.LogsDropped, Attachments: r.Attachments}
		if try(o) {
			return o, true
		}
	}
	if rest, ok := strings.CutPrefix(r.Content, "run_js failed ("); ok {
		kind, msg, ok := strings.Cut(rest, "): ")
		if ok {
			var logs []jstool.LogLine
			if i := strings.Index(msg, "\nConsole:"); i >= 0 {
				for _, line := range strings.Split(msg[i+len("\nConsole:"):], "\n")[1:] {
					lvl, text, _ := strings.Cut(strings.TrimPrefix(line, "["), "] ")
					logs = append(logs, jstool.LogLine{Level: lvl, Text: text})
				}
				msg = msg[:i]
			}
			msg = strings.TrimSuffix(msg, "\nNo capability call completed.")
			o := jstool.Outcome{Failure: &jstool.Failure{Kind: kind, Message: msg}, Logs: logs, Attachments: r.Attachments}
			if try(o) {
				return o, true
			}
		}
	}
	return jstool.Outcome{}, false
}

// noBackend is never called: the recorded executor makes no callback.
type noBackend struct{}

func (noBackend) Invoke(context.Context, jstool.Invocation) (jstool.Value, error) {
	return jstool.Value{}, runtime.Fatal(errors.New("replay: a capability was called during a re-drive"))
}
