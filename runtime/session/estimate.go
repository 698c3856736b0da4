package session

import "github.com/cairn-agents/cairn/runtime/model"

// Token estimates. They decide when to compact and nothing else: budgets
// count what providers report (C34). The estimate is deterministic and
// deliberately pessimistic: one token per four bytes of UTF-8 (non-ASCII
// text counts more bytes than tokens), plus a fixed cost per message, part
// and attachment.
const (
	bytesPerToken      = 4
	perMessageTokens   = 4
	perPartTokens      = 2
	perAttachmentToken = 100
)

func textTokens(s string) int { return (len(s) + bytesPerToken - 1) / bytesPerToken }

// EstimateMessage estimates the tokens of one message.
func EstimateMessage(m model.Message) int {
	n := perMessageTokens
	for _, p := range m.Parts {
		n += perPartTokens + textTokens(p.Text)
		if c := p.ToolCall; c != nil {
			n += textTokens(c.ID) + textTokens(c.Name) + textTokens(c.Args)
		}
		if r := p.ToolResult; r != nil {
			n += textTokens(r.CallID) + textTokens(r.Content) + perAttachmentToken*len(r.Attachments)
		}
		if p.Attachment != nil {
			n += perAttachmentToken
		}
	}
	return n
}

// EstimateMessages estimates the tokens of a window.
func EstimateMessages(msgs []model.Message) int {
	n := 0
	for _, m := range msgs {
		n += EstimateMessage(m)
	}
	return n
}

// EstimateRequest estimates the prompt tokens of a request: system text,
// tool definitions and messages.
func EstimateRequest(req model.Request) int {
	n := textTokens(req.System) + EstimateMessages(req.Messages)
	for _, t := range req.Tools {
		n += perMessageTokens + textTokens(t.Name) + textTokens(t.Description) + textTokens(string(t.InputSchema))
	}
	return n
}

// Limits are a model's explicit limits as overflow detection needs them.
type Limits struct {
	// ContextTokens is the model's context window.
	ContextTokens int
	// OutputTokens is reserved for the response.
	OutputTokens int
	// MarginTokens is kept free for the estimate's error; zero means 5% of
	// the context window, at least 64.
	MarginTokens int
}

// Margin returns the tokens kept free for the estimate's error.
func (l Limits) Margin() int {
	if l.MarginTokens > 0 {
		return l.MarginTokens
	}
	return max(l.ContextTokens/20, 64)
}

// Prompt returns the tokens a prompt may use.
func (l Limits) Prompt() int { return l.ContextTokens - l.OutputTokens - l.Margin() }

// Overflows reports whether req would not fit the limits.
func Overflows(req model.Request, l Limits) bool { return EstimateRequest(req) > l.Prompt() }
