package projections

import (
	"encoding/json"
	"sync"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
)

// ResultPreview is how much of a tool result the call tree keeps: enough
// to read an outcome at a glance; the transcript has the whole text.
const ResultPreview = 400

// TreeRun is one run in the call tree.
type TreeRun struct {
	RunID        string             `json:"run_id"`
	SessionID    string             `json:"session_id"`
	Agent        string             `json:"agent,omitempty"`
	ParentRunID  string             `json:"parent_run_id,omitempty"`
	ParentCallID string             `json:"parent_call_id,omitempty"`
	Status       runtime.CallStatus `json:"status"`
	// Children are the run IDs of its children, in creation order.
	Children []string `json:"children,omitempty"`
	// Calls are its tool calls in the order the model made them.
	Calls []TreeCall `json:"calls,omitempty"`
	// Revision is the last committed revision.
	Revision int64 `json:"revision,omitempty"`
}

// TreeCall is one tool call and its outcome.
type TreeCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Args string `json:"args,omitempty"`
	// Step is the model step whose response made the call.
	Step  int               `json:"step"`
	State runtime.CallState `json:"state"`
	// Result is the start of the tool result (ResultPreview bytes).
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// ChildRunID is the run a spawn or continue call started.
	ChildRunID string `json:"child_run_id,omitempty"`
}

// CallTree is the call tree read model: parents, children, their tool calls
// and outcomes.
type CallTree struct {
	mu   sync.RWMutex
	runs map[string]*TreeRun
}

// NewCallTree returns an empty call tree.
func NewCallTree() *CallTree { return &CallTree{runs: map[string]*TreeRun{}} }

var _ Projection = (*CallTree)(nil)

// Name implements Projection.
func (t *CallTree) Name() string { return "calltree" }

// Filters implements Projection.
func (t *CallTree) Filters() []string {
	return []string{events.AllCreated, events.AllCheckpoints, events.AllEnded}
}

func (t *CallTree) run(e Event) *TreeRun {
	r := t.runs[e.RunID]
	if r == nil {
		r = &TreeRun{RunID: e.RunID, SessionID: e.SessionID, Status: runtime.StatusRunning}
		t.runs[e.RunID] = r
	}
	return r
}

// Apply implements Projection.
func (t *CallTree) Apply(e Event) error {
	if e.RunID == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch e.Type {
	case events.RunCreated:
		var p events.Run
		if e.Payload(&p) != nil {
			return nil
		}
		r := t.run(e)
		r.Agent, r.ParentRunID, r.ParentCallID = p.Agent, p.ParentRunID, p.ParentCallID
		if p.ParentRunID != "" {
			parent := t.runs[p.ParentRunID]
			if parent == nil {
				parent = &TreeRun{RunID: p.ParentRunID, SessionID: p.ParentSessionID, Status: runtime.StatusRunning}
				t.runs[p.ParentRunID] = parent
			}
			parent.Children = append(parent.Children, p.RunID)
			for i := range parent.Calls {
				if parent.Calls[i].ID == p.ParentCallID {
					parent.Calls[i].ChildRunID = p.RunID
				}
			}
		}
	case events.CheckpointCommitted:
		cp, err := e.Checkpoint()
		if err != nil {
			return nil
		}
		r := t.run(e)
		r.Revision = cp.Revision
		if cp.Reply != nil {
			r.Status = runtime.RunStatus(runtime.StatusCompleted, cp.Reply)
		}
		index := make(map[string]int, len(r.Calls))
		for i, c := range r.Calls {
			index[c.ID] = i
		}
		for _, c := range cp.Calls {
			i, ok := index[c.ID]
			if !ok {
				r.Calls = append(r.Calls, TreeCall{ID: c.ID, Name: c.Name, Args: c.Args, Step: cp.Step})
				i = len(r.Calls) - 1
				index[c.ID] = i
			}
			r.Calls[i].State = c.State
		}
		for _, m := range cp.Append {
			for _, p := range m.Parts {
				if tr := p.ToolResult; tr != nil {
					if i, ok := index[tr.CallID]; ok {
						r.Calls[i].Result, r.Calls[i].IsError = preview(tr.Content), tr.IsError
					}
				}
			}
		}
	case events.RunEnded:
		var end events.Ended
		if e.Payload(&end) != nil {
			return nil
		}
		if r := t.run(e); r.Status.Active() {
			r.Status = runtime.CallStatus(end.Status)
			// Its open calls never finish: one being dispatched may have
			// had its effect (unknown), one not yet dispatched did not
			// (skipped). Left as they were, a cancelled run's call read
			// "dispatching" for ever.
			for i, c := range r.Calls {
				switch c.State {
				case runtime.CallDispatching:
					r.Calls[i].State, r.Calls[i].Result = runtime.CallUnknown, "the run "+end.Status+" while it was dispatching: its effect is unknown"
				case runtime.CallPending:
					r.Calls[i].State, r.Calls[i].Result = runtime.CallSkipped, "the run "+end.Status+" before it was dispatched"
				}
			}
		}
	}
	return nil
}

func preview(s string) string {
	if len(s) <= ResultPreview {
		return s
	}
	// Cut at a rune boundary.
	n := ResultPreview
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// Snapshot implements Projection.
func (t *CallTree) Snapshot() ([]byte, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return json.Marshal(t.runs)
}

// Restore implements Projection.
func (t *CallTree) Restore(b []byte) error {
	runs := map[string]*TreeRun{}
	if err := json.Unmarshal(b, &runs); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runs = runs
	return nil
}

// Run returns one run of the tree.
func (t *CallTree) Run(runID string) (TreeRun, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.runs[runID]
	if !ok {
		return TreeRun{}, false
	}
	c := *r
	c.Children = append([]string(nil), r.Children...)
	c.Calls = append([]TreeCall(nil), r.Calls...)
	return c, true
}

// TreeNode is a run with its descendants, for rendering.
type TreeNode struct {
	TreeRun
	Kids []TreeNode `json:"kids,omitempty"`
}

// Tree returns the run and its descendants. A cycle (impossible in a log
// Cairn wrote) is cut rather than followed.
func (t *CallTree) Tree(runID string) (TreeNode, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	seen := map[string]bool{}
	var build func(id string) (TreeNode, bool)
	build = func(id string) (TreeNode, bool) {
		r, ok := t.runs[id]
		if !ok || seen[id] {
			return TreeNode{}, false
		}
		seen[id] = true
		n := TreeNode{TreeRun: *r}
		n.Calls = append([]TreeCall(nil), r.Calls...)
		for _, k := range r.Children {
			if kn, ok := build(k); ok {
				n.Kids = append(n.Kids, kn)
			}
		}
		return n, true
	}
	return build(runID)
}
