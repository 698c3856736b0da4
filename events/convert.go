package events

import (
	"github.com/cairn-agents/cairn/events/wire"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/session"
)

// The conversions between the runtime's structs and the log's (package
// wire), for a reader or writer that holds one and needs the other. The
// commit path and Payload do without them: the runtime's structs encode
// as the wire types do (TestRuntimeEncodesAsWire), and a conversion per
// commit would cost allocations (schema.go). They copy what the two sides
// type differently and share the rest (strings, used call IDs, metadata
// maps, a reply's output, pointers to structs whose fields are the same
// on both sides): a converted value is read, not changed in place.
// TestConversionsKeepEveryField fills every field of each side and checks
// the round trip, so a field added on one side and not converted fails
// there.

// ToWire returns checkpoint cp in the log's form.
func ToWire(cp *runtime.Checkpoint) wire.Checkpoint {
	w := wire.Checkpoint{
		Version: cp.Version, ContractHash: cp.ContractHash, Revision: cp.Revision, RunKey: cp.RunKey,
		Phase: string(cp.Phase), Step: cp.Step, ResponseID: cp.ResponseID, UsedCallIDs: cp.UsedCallIDs,
		Append: MessagesToWire(cp.Append),
		// model.Usage and wire.Usage have the same fields: the pointer converts.
		Usage: (*wire.Usage)(cp.Usage),
	}
	if cp.Calls != nil {
		w.Calls = make([]wire.Call, len(cp.Calls))
		for i, c := range cp.Calls {
			w.Calls[i] = wire.Call{ID: c.ID, Name: c.Name, Args: c.Args, State: string(c.State), ResultID: c.ResultID}
		}
	}
	if r := cp.Reply; r != nil {
		w.Reply = &wire.Reply{Type: string(r.Type), Output: r.Output, Question: r.Question}
	}
	if cp.ModelFailures != nil {
		w.ModelFailures = make([]wire.Failure, len(cp.ModelFailures))
		for i, f := range cp.ModelFailures {
			w.ModelFailures[i] = wire.Failure(f)
		}
	}
	return w
}

// FromWire returns the runtime's checkpoint of w.
func FromWire(w *wire.Checkpoint) runtime.Checkpoint {
	cp := runtime.Checkpoint{
		Version: w.Version, ContractHash: w.ContractHash, Revision: w.Revision, RunKey: w.RunKey,
		Phase: runtime.Phase(w.Phase), Step: w.Step, ResponseID: w.ResponseID, UsedCallIDs: w.UsedCallIDs,
		Append: MessagesFromWire(w.Append),
		Usage:  (*model.Usage)(w.Usage),
	}
	if w.Calls != nil {
		cp.Calls = make([]runtime.CallRecord, len(w.Calls))
		for i, c := range w.Calls {
			cp.Calls[i] = runtime.CallRecord{ID: c.ID, Name: c.Name, Args: c.Args, State: runtime.CallState(c.State), ResultID: c.ResultID}
		}
	}
	if r := w.Reply; r != nil {
		cp.Reply = &runtime.Reply{Type: runtime.ReplyType(r.Type), Output: r.Output, Question: r.Question}
	}
	if w.ModelFailures != nil {
		cp.ModelFailures = make([]model.Failure, len(w.ModelFailures))
		for i, f := range w.ModelFailures {
			cp.ModelFailures[i] = model.Failure(f)
		}
	}
	return cp
}

// MessagesToWire returns transcript messages in the log's form.
func MessagesToWire(ms []model.Message) []wire.Message {
	if ms == nil {
		return nil
	}
	out := make([]wire.Message, len(ms))
	for i, m := range ms {
		out[i] = wire.Message{ID: m.ID, Role: string(m.Role), Meta: m.Meta}
		if m.Parts == nil {
			continue
		}
		parts := make([]wire.Part, len(m.Parts))
		for k, p := range m.Parts {
			parts[k] = wire.Part{Type: string(p.Type), Text: p.Text, Meta: p.Meta,
				ToolCall: (*wire.ToolCall)(p.ToolCall), Attachment: (*wire.Attachment)(p.Attachment)}
			if r := p.ToolResult; r != nil {
				parts[k].ToolResult = &wire.ToolResult{CallID: r.CallID, Name: r.Name, Content: r.Content, IsError: r.IsError,
					Attachments: attachmentsToWire(r.Attachments)}
			}
		}
		out[i].Parts = parts
	}
	return out
}

// MessagesFromWire returns the runtime's messages of ms.
func MessagesFromWire(ms []wire.Message) []model.Message {
	if ms == nil {
		return nil
	}
	out := make([]model.Message, len(ms))
	for i, m := range ms {
		out[i] = model.Message{ID: m.ID, Role: model.Role(m.Role), Meta: m.Meta}
		if m.Parts == nil {
			continue
		}
		parts := make([]model.Part, len(m.Parts))
		for k, p := range m.Parts {
			parts[k] = model.Part{Type: model.PartType(p.Type), Text: p.Text, Meta: p.Meta,
				ToolCall: (*model.ToolCall)(p.ToolCall), Attachment: (*model.Attachment)(p.Attachment)}
			if r := p.ToolResult; r != nil {
				parts[k].ToolResult = &model.ToolResult{CallID: r.CallID, Name: r.Name, Content: r.Content, IsError: r.IsError,
					Attachments: attachmentsFromWire(r.Attachments)}
			}
		}
		out[i].Parts = parts
	}
	return out
}

func attachmentsToWire(as []model.Attachment) []wire.Attachment {
	if as == nil {
		return nil
	}
	out := make([]wire.Attachment, len(as))
	for i, a := range as {
		out[i] = wire.Attachment(a)
	}
	return out
}

func attachmentsFromWire(as []wire.Attachment) []model.Attachment {
	if as == nil {
		return nil
	}
	out := make([]model.Attachment, len(as))
	for i, a := range as {
		out[i] = model.Attachment(a)
	}
	return out
}

// CompactionToWire returns a compaction in the log's form.
func CompactionToWire(c session.Compaction) wire.Compaction {
	return wire.Compaction{Through: c.Through, Window: MessagesToWire(c.Window), Reason: c.Reason}
}

// CompactionFromWire returns the runtime's compaction of w.
func CompactionFromWire(w wire.Compaction) session.Compaction {
	return session.Compaction{Through: w.Through, Window: MessagesFromWire(w.Window), Reason: w.Reason}
}

// Wire returns the payload p in the log's form, as this build writes it.
func (p *Checkpoint) Wire() wire.Commit {
	return wire.Commit{Checkpoint: ToWire(&p.Checkpoint), UsedCallIDsBase: p.UsedCallIDsBase, UsedCallIDsBaseRev: p.UsedCallIDsBaseRev,
		CallsBase: p.CallsBase, CallsBaseRev: p.CallsBaseRev, CallsAt: p.CallsAt, Ledger: p.Ledger}
}

// Wire returns the payload c in the log's form.
func (c *Compaction) Wire() wire.Compacted {
	return wire.Compacted{Compaction: CompactionToWire(c.Compaction), RunID: c.RunID}
}
