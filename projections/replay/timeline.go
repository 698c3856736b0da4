package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
)

// Entry is one line of a run's timeline.
type Entry struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision,omitempty"`
	// Kind is created, attempt, task, model_failure, model, call,
	// result, child, compaction, completed or ended.
	Kind string `json:"kind"`
	Step int    `json:"step,omitempty"`
	// Usage is a model entry's reported tokens.
	Usage *model.Usage `json:"usage,omitempty"`
	// Failure is a model_failure entry's failed provider request: its
	// Time is when the request failed, before the commit of the response
	// it delayed.
	Failure *model.Failure `json:"failure,omitempty"`
	// Ended says how an attempt entry's attempt ended, read from what the
	// log holds after it (an attempt writes no end of its own): completed,
	// needs_input, failed or cancelled with the run; parked (its last
	// commit waits for children); running (the run's latest attempt, not
	// ended); or stopped (crashed, drained, fenced out or failed with an
	// error that was retried: the next attempt resumed its run).
	Ended string `json:"ended,omitempty"`
	// Call fields, for call and result entries.
	CallID string            `json:"call_id,omitempty"`
	Tool   string            `json:"tool,omitempty"`
	State  runtime.CallState `json:"state,omitempty"`
	// Text is what happened, readable (a preview for long results).
	Text string `json:"text"`
}

const previewLen = 240

func short(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= previewLen {
		return s
	}
	n := previewLen
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// Timeline lists what the run did up to revision upTo (0 or the last:
// everything):
// attempts (leases), the task, each model step with its text and calls,
// each call's outcome, children, compactions and the end.
func (h *History) Timeline(upTo int64) []Entry {
	var out []Entry
	var lastSeq uint64 = ^uint64(0)
	// At the latest revision the timeline is the whole log: what came
	// after the last commit (the run's end, a later attempt) is part of
	// it. Cut there, a failed or cancelled run's end was never shown.
	if upTo > 0 && upTo < h.Last() {
		if c, err := h.Revision(upTo); err == nil {
			lastSeq = c.Seq
		}
	}
	attempts := 0
	for _, e := range h.Events {
		if e.Seq > lastSeq {
			break
		}
		if e.RunID != h.RunID && e.Type != events.WindowCompacted {
			continue
		}
		base := Entry{Seq: e.Seq, Time: e.Time, Revision: e.Revision}
		switch e.Type {
		case events.RunCreated:
			var r events.Run
			_ = e.Payload(&r)
			base.Kind = "created"
			base.Text = fmt.Sprintf("run %s of agent %s in session %s", r.RunID, r.Agent, r.SessionID)
			if r.ParentRunID != "" {
				base.Text += fmt.Sprintf(", child of %s (call %s)", r.ParentRunID, r.ParentCallID)
			}
			if r.ForkedFrom != "" {
				base.Text += fmt.Sprintf(", forked from %s at revision %d", r.ForkedFrom, r.ForkedAt)
			}
			out = append(out, base)
		case events.LeaseAcquired:
			var l events.Lease
			_ = e.Payload(&l)
			attempts++
			base.Kind, base.Text = "attempt", fmt.Sprintf("attempt %d: %s holds the lease (epoch %d)", attempts, l.Holder, l.Epoch)
			out = append(out, base)
		case events.WindowCompacted:
			var c events.Compaction
			if e.Payload(&c) != nil || c.RunID != h.RunID {
				continue
			}
			base.Kind = "compaction"
			base.Text = fmt.Sprintf("window compacted (%s) through %s: %d messages now", c.Compaction.Reason, c.Compaction.Through, len(c.Compaction.Window))
			out = append(out, base)
		case events.RunEnded:
			var end events.Ended
			_ = e.Payload(&end)
			base.Kind, base.Text = "ended", fmt.Sprintf("%s: %s", end.Status, end.Reason)
			out = append(out, base)
		case events.CheckpointCommitted:
			cp, err := e.Checkpoint()
			if err != nil {
				continue
			}
			out = append(out, commitEntries(base, cp)...)
		}
	}
	endAttempts(out)
	return out
}

// endAttempts sets how each attempt entry's attempt ended (Entry.Ended):
// the run's end in its span, else the state its last commit left.
func endAttempts(tl []Entry) {
	for i := range tl {
		if tl[i].Kind != "attempt" {
			continue
		}
		ended, parked, next := "", false, false
		for _, e := range tl[i+1:] {
			if e.Kind == "attempt" {
				next = true
				break
			}
			switch e.Kind {
			case "completed":
				ended = "completed"
				if strings.HasPrefix(e.Text, "needs input") {
					ended = "needs_input"
				}
			case "ended":
				ended, _, _ = strings.Cut(e.Text, ":")
			case "model", "result":
				parked = false
			case "call":
				parked = e.Tool == runtime.ToolWait
			}
		}
		switch {
		case ended != "":
			tl[i].Ended = ended
		case parked:
			tl[i].Ended = "parked"
		case next:
			tl[i].Ended = "stopped"
		default:
			tl[i].Ended = "running"
		}
		tl[i].Text += ": " + tl[i].Ended
	}
}

// commitEntries describes one commit: its appended messages, and the
// predispatch of a call when that is all it records.
func commitEntries(base Entry, cp *runtime.Checkpoint) []Entry {
	var out []Entry
	base.Step = cp.Step
	for _, f := range cp.ModelFailures {
		e := base
		// Failed while the run was at the revision before this commit, as
		// the sink said (runtime.SinkEventsOf).
		e.Kind, e.Revision, e.Time, e.Text, e.Failure = "model_failure", cp.Revision-1, f.At, runtime.FailureLine(f), &f
		out = append(out, e)
	}
	calls := map[string]runtime.CallRecord{}
	for _, c := range cp.Calls {
		calls[c.ID] = c
	}
	for i, m := range cp.Append {
		e := base
		switch {
		case cp.Revision == 1 && i == 0:
			e.Kind, e.Text = "task", short(m.Text())
			out = append(out, e)
		case m.ID == cp.ResponseID:
			e.Kind, e.Usage = "model", cp.Usage
			var names []string
			for _, c := range m.ToolCalls() {
				names = append(names, c.Name+"("+c.ID+")")
			}
			e.Text = fmt.Sprintf("step %d", cp.Step)
			if t := m.Text(); t != "" {
				e.Text += ": " + short(t)
			}
			if len(names) > 0 {
				e.Text += " → " + strings.Join(names, ", ")
			} else {
				e.Text += " (no tool call)"
			}
			out = append(out, e)
		default:
			for _, p := range m.Parts {
				if tr := p.ToolResult; tr != nil {
					r := e
					r.Kind, r.CallID, r.Tool, r.State = "result", tr.CallID, tr.Name, calls[tr.CallID].State
					r.Text = short(tr.Content)
					out = append(out, r)
					if child := childOf(tr.Name, tr.Content); child != "" {
						c := e
						c.Kind, c.CallID, c.Text = "child", tr.CallID, child
						out = append(out, c)
					}
				}
			}
		}
	}
	for _, c := range cp.Calls {
		if c.State == runtime.CallDispatching {
			e := base
			e.Kind, e.CallID, e.Tool, e.State = "call", c.ID, c.Name, c.State
			e.Text = fmt.Sprintf("%s %s dispatching: %s", c.Name, c.ID, short(c.Args))
			out = append(out, e)
		}
	}
	if cp.Reply != nil {
		e := base
		e.Kind = "completed"
		if cp.Reply.Type == runtime.ReplyNeedsInput {
			e.Text = "needs input: " + cp.Reply.Question
		} else {
			e.Text = "output: " + short(string(cp.Reply.Output))
		}
		out = append(out, e)
	}
	return out
}

// childOf describes the child a spawn or continue result names.
func childOf(tool, content string) string {
	if !strings.HasPrefix(tool, "spawn_") && tool != runtime.ToolContinue {
		return ""
	}
	var info runtime.AgentRunInfo
	if json.Unmarshal([]byte(content), &info) != nil || info.RunID == "" {
		return ""
	}
	return fmt.Sprintf("child run %s (agent %s, session %s): %s", info.RunID, info.Agent, info.SessionID, info.Status)
}

// Budget is what the log says the run used up to a revision.
type Budget struct {
	Steps    int `json:"steps"`
	Commits  int `json:"commits"`
	Attempts int `json:"attempts"`
	Calls    int `json:"calls"`
	// Tokens of the committed responses (each response commit carries
	// its provider's usage); the node's budget ledger also counts
	// responses lost to a crash and compaction summaries.
	Tokens model.Usage `json:"tokens"`
}

// Usage counts steps, commits, attempts, calls and the committed
// responses' tokens up to revision upTo (0: all).
func (h *History) Usage(upTo int64) Budget {
	var b Budget
	for _, e := range h.Timeline(upTo) {
		switch e.Kind {
		case "attempt":
			b.Attempts++
		case "result":
			b.Calls++
		}
	}
	for _, c := range h.Commits {
		if upTo > 0 && c.Checkpoint.Revision > upTo {
			break
		}
		b.Commits++
		b.Steps = c.Checkpoint.Step
		if c.Checkpoint.Usage != nil {
			b.Tokens = b.Tokens.Add(*c.Checkpoint.Usage)
		}
	}
	return b
}

// Print writes the timeline readably.
func Print(w io.Writer, h *History, upTo int64) {
	r := h.Run
	fmt.Fprintf(w, "run %s  session %s", h.RunID, h.SessionID)
	if r.Agent != "" {
		fmt.Fprintf(w, "  agent %s  owner %s  root %s", r.Agent, r.Owner, r.RootRunID)
	}
	fmt.Fprintln(w)
	for _, e := range h.Timeline(upTo) {
		rev := "     "
		if e.Revision > 0 {
			rev = fmt.Sprintf("r%-4d", e.Revision)
		}
		fmt.Fprintf(w, "%s %s  %-10s %s\n", rev, e.Time.Format("15:04:05.000"), e.Kind, strings.ReplaceAll(e.Text, "\n", " ⏎ "))
	}
	b := h.Usage(upTo)
	fmt.Fprintf(w, "budget: %d steps, %d calls, %d commits, %d attempts, %d input + %d output tokens (committed responses)\n", b.Steps, b.Calls, b.Commits, b.Attempts, b.Tokens.InputTokens, b.Tokens.OutputTokens)
}
