package session

import (
	"fmt"
	"strings"

	"github.com/cairn-agents/cairn/runtime/model"
)

// Compaction, in order of cost (C36): Prune shortens old tool results in
// place; when that is not enough, Split cuts the window into a head that a
// summary replaces and a tail kept verbatim, SummaryRequest asks the model
// for the summary, and Continuation opens the new window with it. None of it
// performs I/O: the run loop reserves budget, calls the model and commits
// the new window with SessionStore.Compact at a model boundary (C15).

// prunedMarker ends every pruned tool result; Prune never prunes twice.
const prunedMarker = "[pruned at compaction:"

// pruneKeepBytes is how much of a pruned result stays readable.
const pruneKeepBytes = 200

// MetaContinuation marks the message that opens a compacted window; its
// value is the compaction's reason. Meta keys starting with "cairn." are
// the runtime's own: provider adapters ignore them.
const MetaContinuation = "cairn.continuation"

// metaTask carries the original request through repeated compactions.
const metaTask = "cairn.task"

// Prune returns a copy of window in which every tool result outside the most
// recent keepTokens is cut to a short head and a marker saying what was
// removed (the audit history keeps it whole). It reports whether anything
// changed. Message IDs, tool-call pairing and every other part stay as they
// are.
func Prune(window []model.Message, keepTokens int) ([]model.Message, bool) {
	return PruneRedacted(window, keepTokens, nil)
}

// PruneRedacted is Prune with the redactor run over the whole of a tool
// result before it is cut (C36): a secret that straddles the cut is
// replaced whole, where redacting the cut head could only miss the prefix
// it keeps. A result that is not cut stays as it is. A nil redact is Prune.
func PruneRedacted(window []model.Message, keepTokens int, redact func(string) string) ([]model.Message, bool) {
	out := make([]model.Message, len(window))
	copy(out, window)
	protected := 0
	changed := false
	for i := len(out) - 1; i >= 0; i-- {
		protected += EstimateMessage(out[i])
		if protected <= keepTokens {
			continue
		}
		m := out[i]
		var parts []model.Part
		for j, p := range m.Parts {
			r := p.ToolResult
			if r == nil || len(r.Content) <= 2*pruneKeepBytes || strings.Contains(r.Content, prunedMarker) {
				continue
			}
			whole := r.Content
			if redact != nil {
				if whole = redact(whole); len(whole) <= 2*pruneKeepBytes {
					continue
				}
			}
			if parts == nil {
				parts = append([]model.Part(nil), m.Parts...)
			}
			cut := *r
			head := whole[:pruneKeepBytes]
			for len(head) > 0 && !utf8Boundary(whole, len(head)) {
				head = head[:len(head)-1]
			}
			cut.Content = fmt.Sprintf("%s\n%s %d bytes of this tool result were removed to fit the context window; do not rely on what is missing.]", head, prunedMarker, len(whole)-len(head))
			parts[j].ToolResult = &cut
		}
		if parts != nil {
			m.Parts = parts
			out[i] = m
			changed = true
		}
	}
	return out, changed
}

func utf8Boundary(s string, i int) bool { return i >= len(s) || s[i]&0xC0 != 0x80 }

// Split cuts window into a head to summarize and a tail to keep. The tail
// holds at most tailTokens (but always the last assistant message and what
// follows it) and never starts with a tool result whose call is in the head:
// a call and its result stay together (C36). head is empty when nothing can
// be cut.
func Split(window []model.Message, tailTokens int) (head, tail []model.Message) {
	if len(window) == 0 {
		return nil, nil
	}
	lastAssistant := len(window)
	for i := len(window) - 1; i >= 0; i-- {
		if window[i].Role == model.RoleAssistant {
			lastAssistant = i
			break
		}
	}
	cut := len(window)
	size := 0
	for i := len(window) - 1; i >= 0; i-- {
		size += EstimateMessage(window[i])
		if size > tailTokens && i < lastAssistant {
			break
		}
		cut = i
	}
	// Never start the tail with tool results: move the cut back to the
	// assistant message that made the calls.
	for cut > 0 && cut < len(window) && window[cut].Role == model.RoleTool {
		cut--
	}
	if cut == len(window) && lastAssistant < len(window) {
		cut = lastAssistant
	}
	return window[:cut], window[cut:]
}

// SummaryPrompt is the system prompt of a compaction request.
const SummaryPrompt = `You compact an agent's conversation so that it can continue in a smaller context window.
Write a summary that lets the agent carry on without the original messages:
- the task, its constraints and the expected output, as stated;
- what has been done: tool calls made, their outcomes, child agents spawned (with their call_id values) and their status;
- facts learned, with identifiers, numbers and names exactly as they appeared;
- what remains to be done and what the agent was doing last.
Do not invent anything. Do not call tools. Answer with the summary text only.`

// SummaryRequest builds the compaction request for head, rendered as plain
// text so that it carries no tool-call structure a provider would check,
// and cut to fit l with outputTokens left for the summary. The caller passes
// a redacted head (C36).
func SummaryRequest(head []model.Message, l Limits, outputTokens int) model.Request {
	room := l.ContextTokens - outputTokens - l.Margin() - textTokens(SummaryPrompt) - perMessageTokens - perPartTokens
	return model.Request{
		Purpose:         model.PurposeCompaction,
		System:          SummaryPrompt,
		Messages:        []model.Message{model.TextMessage("compaction-input", model.RoleUser, Render(head, room))},
		MaxOutputTokens: outputTokens,
	}
}

// renderMessageBytes bounds one message in a rendered transcript.
const renderMessageBytes = 4000

// Render renders messages as a plain-text transcript of at most maxTokens
// (by the estimate). When it must drop messages it keeps the first one (the
// task or an earlier summary) and the most recent ones, and says how many
// were left out.
func Render(msgs []model.Message, maxTokens int) string {
	lines := make([]string, len(msgs))
	for i, m := range msgs {
		lines[i] = renderMessage(m)
	}
	total := 0
	for _, l := range lines {
		total += textTokens(l)
	}
	if total <= maxTokens || len(lines) <= 1 {
		return strings.Join(lines, "\n\n")
	}
	budget := maxTokens - textTokens(lines[0]) - 16
	keep := len(lines)
	for keep > 1 && budget-textTokens(lines[keep-1]) >= 0 {
		budget -= textTokens(lines[keep-1])
		keep--
	}
	out := []string{lines[0], fmt.Sprintf("[... %d messages omitted ...]", keep-1)}
	return strings.Join(append(out, lines[keep:]...), "\n\n")
}

func renderMessage(m model.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s", m.Role)
	for _, p := range m.Parts {
		switch {
		case p.ToolCall != nil:
			fmt.Fprintf(&b, "\n[call %s %s] %s", p.ToolCall.ID, p.ToolCall.Name, p.ToolCall.Args)
		case p.ToolResult != nil:
			status := "result"
			if p.ToolResult.IsError {
				status = "error"
			}
			fmt.Fprintf(&b, "\n[%s of %s %s] %s", status, p.ToolResult.CallID, p.ToolResult.Name, p.ToolResult.Content)
		case p.Attachment != nil:
			fmt.Fprintf(&b, "\n[attachment %s %s]", p.Attachment.Name, p.Attachment.Ref)
		case p.Type == model.PartText:
			b.WriteString("\n" + p.Text)
		}
	}
	s := b.String()
	if len(s) > renderMessageBytes {
		cut := renderMessageBytes
		for cut > 0 && !utf8Boundary(s, cut) {
			cut--
		}
		s = s[:cut] + fmt.Sprintf(" [... %d bytes cut]", len(s)-cut)
	}
	return s
}

// Continuation builds the message that opens a compacted window: what
// happened (the summary), the original task when it is known, and what the
// model should do now.
func Continuation(id, task, summary string) model.Message {
	var b strings.Builder
	b.WriteString("[runtime] Earlier messages of this conversation were replaced by a summary to fit the context window. ")
	b.WriteString("Tool calls and results mentioned in it happened; do not repeat them. Continue from where you left off: the most recent messages follow.")
	if task != "" {
		b.WriteString("\n\n## The original request\n" + task)
	}
	b.WriteString("\n\n## Summary of the work so far\n" + summary)
	return model.Message{ID: id, Role: model.RoleUser, Meta: map[string][]byte{MetaContinuation: []byte("summary"), metaTask: []byte(task)},
		Parts: []model.Part{{Type: model.PartText, Text: b.String()}}}
}

// Task returns the original request of a window: the task recorded in a
// continuation message, or the text of the first user message.
func Task(window []model.Message) string {
	for _, m := range window {
		if m.Role != model.RoleUser {
			continue
		}
		if _, ok := m.Meta[MetaContinuation]; ok {
			return string(m.Meta[metaTask])
		}
		return m.Text()
	}
	return ""
}
