package actors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/actors/lifecycle"
	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// controller is the node's runtime.Controller for one run. Everything it
// does is scoped by the run it was built for (the host's record), never by
// IDs the model sends: a call ID names a child only through the parent's
// own run ID, and ownership is checked against the child's record (C10,
// C27).
type controller struct {
	n   *Node
	run *events.Run
	// version is the definition version the run is pinned to: its
	// children are created under it (definition.Version holds them).
	version string
	// upgradeDue stops the attempt at its next model boundary: an upgrade
	// to another version is pending (upgrade.go).
	upgradeDue bool
	// budget is the attempt's view of its root's budget entry.
	budget *budgetView
	// inLog, when set, is the run's budget kept in its log (the budget
	// entry then holds what its commits do not).
	inLog *inLog
}

var _ runtime.Controller = (*controller)(nil)

// BeforeModel reserves a step of the root's budget (C24, C35).
func (c *controller) BeforeModel(ctx context.Context) error {
	if c.upgradeDue {
		// Before anything is reserved: the next attempt, at this
		// boundary, takes the new version.
		return errUpgradeDue
	}
	if c.inLog != nil {
		return c.inLog.reserve(ctx)
	}
	return c.n.ledger.reserve(ctx, c.run.RootRunID, c.budget)
}

// child is an owned child call.
type child struct {
	CallID    string `json:"call_id"`
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
}

func (c *controller) childKey(callID string) string { return c.run.RunID + "." + keyOf(callID) }

// Spawn creates the child run once per tool call (C25).
func (c *controller) Spawn(ctx context.Context, toolCallID, slug string, input []byte) (_ runtime.AgentRunInfo, err error) {
	defer classify(&err)
	version, err := c.n.versions.child(ctx, c.version, slug)
	if err != nil {
		return runtime.AgentRunInfo{}, err
	}
	sess, run := ChildIDs(c.run.RunID, toolCallID)
	rec := events.Run{RunID: run, SessionID: sess, Agent: slug, Message: string(input), RootRunID: c.run.RootRunID,
		ParentRunID: c.run.RunID, ParentSessionID: c.run.SessionID, ParentCallID: toolCallID, Owner: c.run.Owner, Definition: version}
	return c.start(ctx, rec, 0)
}

// Continue starts a new run in a completed child session (C26).
func (c *controller) Continue(ctx context.Context, toolCallID, sessionID, prompt string) (_ runtime.AgentRunInfo, err error) {
	defer classify(&err)
	if events.ValidID(sessionID) != nil {
		return runtime.AgentRunInfo{}, reject("session %q is not a session of this run's children", sessionID)
	}
	_, run := ChildIDs(c.run.RunID, toolCallID)
	if existing, err := c.n.runlog.readRun(ctx, sessionID, run); err != nil {
		return runtime.AgentRunInfo{}, err
	} else if existing != nil {
		// A retry: the first try created the run, and may have stopped
		// before recording it as this run's child, so record it now, as a
		// retried Spawn does.
		if _, err := c.same(existing, events.Run{Agent: existing.Agent, Message: prompt, ParentRunID: c.run.RunID, ParentCallID: toolCallID}); err != nil {
			return runtime.AgentRunInfo{}, err
		}
		return c.adopt(ctx, *existing)
	}
	// The session must belong to a child of this run, and its latest run
	// must have finished.
	latest, err := c.latestRun(ctx, sessionID)
	if err != nil {
		return runtime.AgentRunInfo{}, err
	}
	if latest == nil || latest.ParentRunID != c.run.RunID {
		return runtime.AgentRunInfo{}, reject("session %q is not a session of this run's children", sessionID)
	}
	// The new run is pinned to this run's version, as a spawn is.
	version, err := c.n.versions.child(ctx, c.version, latest.Agent)
	if err != nil {
		return runtime.AgentRunInfo{}, err
	}
	st, err := c.n.runlog.status(ctx, sessionID, latest.RunID)
	if err != nil {
		return runtime.AgentRunInfo{}, err
	}
	if st.Status != runtime.StatusCompleted {
		return runtime.AgentRunInfo{}, reject("session %q has a run that is %s; continue only a completed session", sessionID, st.Status)
	}
	last, err := c.n.runlog.last(ctx, events.SessionAll(sessionID))
	if err != nil {
		return runtime.AgentRunInfo{}, err
	}
	if purgedBy(last, sessionID) {
		return runtime.AgentRunInfo{}, reject("session %q was purged, its retention having run out", sessionID)
	}
	rec := events.Run{RunID: run, SessionID: sessionID, Agent: latest.Agent, Message: prompt, RootRunID: c.run.RootRunID,
		ParentRunID: c.run.RunID, ParentSessionID: c.run.SessionID, ParentCallID: toolCallID, Continues: latest.RunID, Owner: c.run.Owner,
		Definition: version}
	return c.start(ctx, rec, last.Sequence)
}

// latestRun returns the record of a session's most recent run.
func (c *controller) latestRun(ctx context.Context, sessionID string) (*events.Run, error) {
	var r events.Run
	found, err := c.n.runlog.lastPayload(ctx, events.SessionRunsCreated(sessionID), &r)
	if err != nil || !found {
		return nil, err
	}
	return &r, nil
}

// start creates a child run (or finds the one a retry created), records it
// as this run's child and wakes its actor.
func (c *controller) start(ctx context.Context, rec events.Run, expectSeq uint64) (runtime.AgentRunInfo, error) {
	got, err := c.n.runlog.createRun(ctx, rec, expectSeq)
	switch {
	case errors.Is(err, errExists):
		if _, err := c.same(got, rec); err != nil {
			return runtime.AgentRunInfo{}, err
		}
	case err != nil:
		return runtime.AgentRunInfo{}, err
	}
	return c.adopt(ctx, rec)
}

// adopt records rec, a run created for one of this run's calls, as this
// run's child (in the active set while it runs), wakes its actor and
// returns its status. Every try of the call does it: the record is a put
// of the same value, the wake of a running actor a no-op.
func (c *controller) adopt(ctx context.Context, rec events.Run) (runtime.AgentRunInfo, error) {
	if err := c.n.track(ctx, c.childKey(rec.ParentCallID), child{CallID: rec.ParentCallID, SessionID: rec.SessionID, RunID: rec.RunID}); err != nil {
		return runtime.AgentRunInfo{}, err
	}
	st, err := c.n.runlog.status(ctx, rec.SessionID, rec.RunID)
	if err != nil {
		return runtime.AgentRunInfo{}, err
	}
	switch {
	case st.Status == runtime.StatusRunning:
		c.n.wake(rec.SessionID, rec.RunID, lifecycle.ReasonStarted)
	case !st.Status.Active():
		// The child ended while track read it running: track's write to
		// the active set may have landed after the end's purge. Purged
		// again here, after that write, the set keeps no finished run.
		if err := c.n.leaveActive(ctx, rec.RunID); err != nil {
			return runtime.AgentRunInfo{}, err
		}
	}
	return runtime.AgentRunInfo{CallID: rec.ParentCallID, RunID: rec.RunID, SessionID: rec.SessionID, Agent: rec.Agent, Status: st.Status}, nil
}

// same checks that a retried spawn or continue asks for what the first did.
func (c *controller) same(existing *events.Run, want events.Run) (runtime.AgentRunInfo, error) {
	if existing.ParentRunID != want.ParentRunID || existing.ParentCallID != want.ParentCallID {
		return runtime.AgentRunInfo{}, reject("call %q names a run this run does not own", want.ParentCallID)
	}
	if existing.Agent != want.Agent || existing.Message != want.Message {
		return runtime.AgentRunInfo{}, runtime.Fatal(fmt.Errorf("actors: call %s repeated with other arguments (agent %q, input differs: %v)", want.ParentCallID, want.Agent, existing.Message != want.Message))
	}
	return runtime.AgentRunInfo{CallID: existing.ParentCallID, RunID: existing.RunID, SessionID: existing.SessionID, Agent: existing.Agent, Status: runtime.StatusRunning}, nil
}

// owned returns the child a call ID names, or an error when this run has no
// such child. The answer is committed (a rejection the model sees), so it
// is read from the children bucket's stream leader: a replica that is
// behind would answer "not found" for a child this run recorded a moment
// ago (a paused node's replica just back, say), and the run would be told
// for good that its own child is not one. A failed read stops the attempt
// (classify), never reaches the model.
func (c *controller) owned(ctx context.Context, callID string) (child, error) {
	v, _, found, err := c.n.childrenW.get(ctx, c.childKey(callID))
	if err != nil {
		return child{}, fmt.Errorf("actors: children of %s: %w", c.run.RunID, err)
	}
	if !found {
		return child{}, reject("call %q is not a child of this run", callID)
	}
	var ch child
	if err := jsonUnmarshal(v, &ch); err != nil {
		return child{}, err
	}
	return ch, nil
}

func (c *controller) info(ctx context.Context, callID string) (runtime.CallInfo, error) {
	ch, err := c.owned(ctx, callID)
	if err != nil {
		return runtime.CallInfo{}, err
	}
	rec, err := c.n.runlog.readRun(ctx, ch.SessionID, ch.RunID)
	if err != nil {
		return runtime.CallInfo{}, fmt.Errorf("actors: read the record of child %s: %w", ch.RunID, err)
	}
	if rec == nil {
		return runtime.CallInfo{}, fmt.Errorf("actors: child %s has no record", ch.RunID)
	}
	st, err := c.n.runlog.status(ctx, ch.SessionID, ch.RunID)
	if err != nil {
		return runtime.CallInfo{}, err
	}
	return runtime.CallInfo{AgentRunInfo: runtime.AgentRunInfo{CallID: callID, RunID: ch.RunID, SessionID: ch.SessionID, Agent: rec.Agent, Status: st.Status}, Reply: st.Reply, Error: st.Error}, nil
}

// parallel calls fn(0) to fn(n-1), at most limit at once, and returns
// when all have returned.
func parallel(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// getParallel bounds the reads Get makes at once.
const getParallel = 16

// Get inspects owned calls only (C27). The children are read at once (a
// parent woken by its last child reads them all before its next step: read
// one after another they were most of that wake-up's time); the answer and
// its first error, in the order of ids, are what reading them in order
// gives.
func (c *controller) Get(ctx context.Context, ids []string) (_ []runtime.CallInfo, err error) {
	defer classify(&err)
	out := make([]runtime.CallInfo, len(ids))
	errs := make([]error, len(ids))
	parallel(len(ids), getParallel, func(i int) { out[i], errs[i] = c.info(ctx, ids[i]) })
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Cancel records a durable cancellation of owned children and stops their
// actors (C27). A child that finished first keeps its status.
func (c *controller) Cancel(ctx context.Context, ids []string) (_ []runtime.CancelInfo, err error) {
	defer classify(&err)
	chs := make([]child, len(ids))
	for i, id := range ids {
		ch, err := c.owned(ctx, id)
		if err != nil {
			return nil, err
		}
		chs[i] = ch
	}
	out := make([]runtime.CancelInfo, 0, len(ids))
	for i, ch := range chs {
		st, err := c.n.runlog.endRun(ctx, ch.SessionID, ch.RunID, runtime.StatusCancelled, "cancelled by its parent")
		if err != nil {
			return nil, err
		}
		ci := runtime.CancelInfo{CallID: ids[i], Status: st.Status, Cancelled: st.Status == runtime.StatusCancelled && st.Error == "cancelled by its parent"}
		if !ci.Cancelled {
			ci.Reason = "already " + string(st.Status)
		}
		c.n.stop(ch.SessionID, ch.RunID, "cancelled")
		out = append(out, ci)
	}
	return out, nil
}

// Wait answers when the calls finished or the original deadline passed;
// otherwise the registration is durable and it returns ErrWaiting (C28).
func (c *controller) Wait(ctx context.Context, toolCallID string, req runtime.WaitRequest) (_ runtime.WaitResult, err error) {
	defer classify(&err)
	for _, id := range req.CallIDs {
		if _, err := c.owned(ctx, id); err != nil {
			return runtime.WaitResult{}, err
		}
	}
	w, err := c.n.waits.register(ctx, c.run.RunID, toolCallID, req)
	if err != nil {
		return runtime.WaitResult{}, err
	}
	// Read the children after the registration is durable: a completion
	// that lands in between is seen here or wakes the run afterwards.
	infos, err := c.Get(ctx, w.IDs)
	if err != nil {
		return runtime.WaitResult{}, err
	}
	if h := c.n.cfg.Hooks.WaitRead; h != nil {
		h(c.run.RunID)
	}
	done := 0
	for _, in := range infos {
		if !in.Status.Active() {
			done++
		}
	}
	if done == len(infos) || (w.Mode == runtime.WaitAny && done > 0) {
		return runtime.WaitResult{Calls: infos}, nil
	}
	if w.Deadline > 0 && !c.n.now().Before(time.Unix(0, w.Deadline)) {
		return runtime.WaitResult{TimedOut: true, Calls: infos}, nil // cancels nothing
	}
	return runtime.WaitResult{}, fmt.Errorf("actors: %d of %d calls still running: %w", len(infos)-done, len(infos), runtime.ErrWaiting)
}

// Complete rejects a completion while children are active (C29, C30). An
// identical replay passes the same check. Finalization (notifying the
// parent) happens only from the completed commit itself.
func (c *controller) Complete(ctx context.Context, reply runtime.Reply) (err error) {
	defer classify(&err)
	var active []string
	err = c.n.childrenW.entries(ctx, c.run.RunID, func(_ string, value []byte) error {
		var ch child
		if err := jsonUnmarshal(value, &ch); err != nil {
			return err
		}
		st, err := c.n.runlog.status(ctx, ch.SessionID, ch.RunID)
		if err != nil {
			return err
		}
		if st.Status.Active() {
			active = append(active, ch.CallID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("actors: children of %s: %w", c.run.RunID, err)
	}
	if len(active) > 0 {
		sort.Strings(active)
		return reject("children still active: %v; wait for or cancel them first", active)
	}
	return nil
}

// rejection is a controller answer the model must see (C30): a refusal of
// what it asked, not a failure of the node.
type rejection struct{ msg string }

func (r rejection) Error() string { return r.msg }

func reject(format string, args ...any) error { return rejection{fmt.Sprintf(format, args...)} }

// classify makes every controller error but a rejection (and a wait that
// parks) stop the attempt instead of reaching the model as a tool error: a
// read that failed while a stream leader moved after a node died says
// nothing about the run, and the actor retries the attempt from its last
// commit.
//
// A conflict, a lost lease or a busy session met here is another run's (a
// child's session moved on, a child was cancelled meanwhile), never this
// run's own: it is hidden from the attempt's caller, which would take it
// for this run being fenced out and stop it for good, with nobody to wake
// it. The attempt is retried instead, and its own commits find out whether
// this run's lease was lost.
func classify(err *error) {
	var r rejection
	var f runtime.FatalToolError
	if *err == nil || errors.As(*err, &r) || errors.As(*err, &f) || errors.Is(*err, runtime.ErrWaiting) {
		return
	}
	if errors.Is(*err, runtime.ErrConflict) || errors.Is(*err, runtime.ErrLeaseLost) || errors.Is(*err, runtime.ErrSessionBusy) {
		*err = otherRun{*err}
	}
	*err = runtime.Fatal(*err)
}

// otherRun hides the sentinel errors of another run's store from errors.Is.
type otherRun struct{ err error }

func (o otherRun) Error() string { return "another run's log: " + o.err.Error() }
