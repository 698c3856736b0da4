// Package runtimetest has hand-written fakes of the run loop's host
// interfaces: a Controller with durable-looking state and budgets, an
// executor factory that counts what it runs, a Backend, a Sink recorder and
// a fixed clock. They keep their state across attempts the way a host's
// durable records would, so crash tests can count every dispatch.
package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cairn-agents/cairn/runtime"
)

// ErrBudgetExhausted is returned by BeforeModel when the step budget is spent.
var ErrBudgetExhausted = errors.New("runtimetest: step budget exhausted")

// Controller is a fake runtime.Controller. Children are simulated: Spawn
// records a running child; FinishChildren completes them; Wait parks until
// its dependencies finished or its original deadline passed.
type Controller struct {
	// Steps limits BeforeModel reservations; 0 is unlimited.
	Steps int
	// RejectComplete makes Complete fail with this error while set.
	RejectComplete error
	// Clock is used for wait deadlines; nil means a fixed clock.
	Clock runtime.Clock
	// Reserve, when set, is BeforeModel's reservation instead of the
	// count against Steps: a host's own budget under the fake's other
	// methods (the crash matrix run over a node's budget). Its error is
	// BeforeModel's.
	Reserve func(ctx context.Context) error

	mu       sync.Mutex
	reserved int
	children map[string]*child
	order    []string
	waits    map[string]time.Time // tool call ID -> original deadline
	replied  *runtime.Reply
	// Calls counts every method call; PerCall counts by method and tool-call ID.
	calls   map[string]int
	perCall map[string]int
}

type child struct {
	info  runtime.AgentRunInfo
	input string
	reply *runtime.Reply
}

func (c *Controller) init() {
	if c.calls == nil {
		c.calls, c.perCall = map[string]int{}, map[string]int{}
		c.children, c.waits = map[string]*child{}, map[string]time.Time{}
	}
}

func (c *Controller) count(method, id string) {
	c.init()
	c.calls[method]++
	if id != "" {
		c.perCall[method+"/"+id]++
	}
}

// Count returns how often method was called.
func (c *Controller) Count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	return c.calls[method]
}

// CountFor returns how often method was called for one tool-call ID (or
// child call ID for Get and Cancel).
func (c *Controller) CountFor(method, id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	return c.perCall[method+"/"+id]
}

// PerCall returns a copy of the per-call counters ("Method/id" -> n).
func (c *Controller) PerCall() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	out := make(map[string]int, len(c.perCall))
	for k, v := range c.perCall {
		out[k] = v
	}
	return out
}

// Reserved returns the number of successful step reservations.
func (c *Controller) Reserved() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reserved
}

// Children returns the spawned children's call IDs in spawn order.
func (c *Controller) Children() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.order)
}

// FinishChildren completes every running child with an output reply.
func (c *Controller) FinishChildren() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	for _, id := range c.order {
		ch := c.children[id]
		if ch.info.Status.Active() {
			ch.info.Status = runtime.StatusCompleted
			ch.reply = &runtime.Reply{Type: runtime.ReplyOutput, Output: []byte(fmt.Sprintf(`{"child":%q}`, ch.info.Agent))}
		}
	}
}

func (c *Controller) now() time.Time {
	if c.Clock == nil {
		return time.Unix(1_700_000_000, 0).UTC()
	}
	return c.Clock.Now()
}

// BeforeModel implements runtime.Controller.
func (c *Controller) BeforeModel(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count("BeforeModel", "")
	if c.Reserve != nil {
		if err := c.Reserve(ctx); err != nil {
			return err
		}
		c.reserved++
		return nil
	}
	if c.Steps > 0 && c.reserved >= c.Steps {
		return fmt.Errorf("%w: %d of %d used", ErrBudgetExhausted, c.reserved, c.Steps)
	}
	c.reserved++
	return nil
}

// Spawn implements runtime.Controller: deduplicated by tool-call ID, with
// the input checked to match (C25).
func (c *Controller) Spawn(ctx context.Context, toolCallID, slug string, input []byte) (runtime.AgentRunInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count("Spawn", toolCallID)
	if ch, ok := c.children[toolCallID]; ok {
		if ch.input != string(input) || ch.info.Agent != slug {
			return runtime.AgentRunInfo{}, runtime.Fatal(fmt.Errorf("runtimetest: spawn %s repeated with other arguments", toolCallID))
		}
		return ch.info, nil
	}
	info := runtime.AgentRunInfo{CallID: toolCallID, RunID: "run-" + toolCallID, SessionID: "sess-" + toolCallID, Agent: slug, Status: runtime.StatusRunning}
	c.children[toolCallID] = &child{info: info, input: string(input)}
	c.order = append(c.order, toolCallID)
	return info, nil
}

// Continue implements runtime.Controller.
func (c *Controller) Continue(ctx context.Context, toolCallID, sessionID, prompt string) (runtime.AgentRunInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count("Continue", toolCallID)
	if ch, ok := c.children[toolCallID]; ok {
		if ch.input != prompt || ch.info.SessionID != sessionID {
			return runtime.AgentRunInfo{}, runtime.Fatal(fmt.Errorf("runtimetest: continue %s repeated with other arguments", toolCallID))
		}
		return ch.info, nil
	}
	var prev *child
	for _, id := range c.order {
		if c.children[id].info.SessionID == sessionID {
			prev = c.children[id]
		}
	}
	if prev == nil {
		return runtime.AgentRunInfo{}, fmt.Errorf("session %q is not a session of this run's children", sessionID)
	}
	if prev.info.Status.Active() {
		return runtime.AgentRunInfo{}, fmt.Errorf("session %q has an active run", sessionID)
	}
	info := runtime.AgentRunInfo{CallID: toolCallID, RunID: "run-" + toolCallID, SessionID: sessionID, Agent: prev.info.Agent, Status: runtime.StatusRunning}
	c.children[toolCallID] = &child{info: info, input: prompt}
	c.order = append(c.order, toolCallID)
	return info, nil
}

func (c *Controller) infos(ids []string) ([]runtime.CallInfo, error) {
	out := make([]runtime.CallInfo, 0, len(ids))
	for _, id := range ids {
		ch, ok := c.children[id]
		if !ok {
			return nil, fmt.Errorf("call %q is not a child of this run", id)
		}
		out = append(out, runtime.CallInfo{AgentRunInfo: ch.info, Reply: ch.reply})
	}
	return out, nil
}

// Get implements runtime.Controller: only owned calls (C27).
func (c *Controller) Get(ctx context.Context, ids []string) ([]runtime.CallInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.count("Get", id)
	}
	return c.infos(ids)
}

// Cancel implements runtime.Controller.
func (c *Controller) Cancel(ctx context.Context, ids []string) ([]runtime.CancelInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]runtime.CancelInfo, 0, len(ids))
	for _, id := range ids {
		c.count("Cancel", id)
		ch, ok := c.children[id]
		if !ok {
			return nil, fmt.Errorf("call %q is not a child of this run", id)
		}
		ci := runtime.CancelInfo{CallID: id, Status: ch.info.Status}
		if ch.info.Status.Active() {
			ch.info.Status, ci.Status, ci.Cancelled = runtime.StatusCancelled, runtime.StatusCancelled, true
		} else {
			ci.Reason = "already finished"
		}
		out = append(out, ci)
	}
	return out, nil
}

// Wait implements runtime.Controller: the first Wait of a tool call fixes
// its deadline; later ones reuse it (C28).
func (c *Controller) Wait(ctx context.Context, toolCallID string, req runtime.WaitRequest) (runtime.WaitResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count("Wait", toolCallID)
	infos, err := c.infos(req.CallIDs)
	if err != nil {
		return runtime.WaitResult{}, err
	}
	deadline, ok := c.waits[toolCallID]
	if !ok {
		if req.Timeout > 0 {
			deadline = c.now().Add(req.Timeout)
		}
		c.waits[toolCallID] = deadline
	}
	done := 0
	for _, in := range infos {
		if !in.Status.Active() {
			done++
		}
	}
	if (req.Mode == runtime.WaitAny && done > 0) || done == len(infos) {
		return runtime.WaitResult{Calls: infos}, nil
	}
	if !deadline.IsZero() && !c.now().Before(deadline) {
		return runtime.WaitResult{TimedOut: true, Calls: infos}, nil
	}
	return runtime.WaitResult{}, fmt.Errorf("runtimetest: wait %s: %w", toolCallID, runtime.ErrWaiting)
}

// Deadline returns the recorded deadline of a wait.
func (c *Controller) Deadline(toolCallID string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	d, ok := c.waits[toolCallID]
	return d, ok
}

// Complete implements runtime.Controller (C29).
func (c *Controller) Complete(ctx context.Context, reply runtime.Reply) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count("Complete", "")
	if c.RejectComplete != nil {
		return c.RejectComplete
	}
	var active []string
	for _, id := range c.order {
		if c.children[id].info.Status.Active() {
			active = append(active, id)
		}
	}
	if len(active) > 0 {
		sort.Strings(active)
		return fmt.Errorf("children still active: %v; wait for or cancel them first", active)
	}
	if c.replied != nil {
		if c.replied.Type != reply.Type || string(c.replied.Output) != string(reply.Output) || c.replied.Question != reply.Question {
			return runtime.Fatal(errors.New("runtimetest: complete replayed with a different reply"))
		}
		return nil
	}
	r := reply
	c.replied = &r
	return nil
}

// Total returns the number of calls of every method.
func (c *Controller) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	n := 0
	for _, v := range c.calls {
		n += v
	}
	return n
}
