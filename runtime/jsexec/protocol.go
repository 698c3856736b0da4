package jsexec

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/cairn-agents/cairn/runtime/jstool"
)

// The worker protocol: each frame is a 4-byte big-endian length and that
// many bytes of JSON (a frame). The parent speaks first:
//
//	parent -> worker   init     limits
//	worker -> parent   ready    the worker's pid and address-space limit
//	parent -> worker   exec     one script (id, call ID, code, capability names)
//	worker -> parent   callback a capability call of script id (seq, name, args)
//	parent -> worker   cbr      that call's result (value, or error text)
//	parent -> worker   cancel   stop script id (ctx ended)
//	worker -> parent   result   script id's outcome
//
// One script runs at a time, each in a realm of its own that binds the
// exec frame's capabilities; script ids are unique over the worker's life,
// which spans the scripts of many runs (see pool.go), so a frame about an
// earlier script never reaches a later one. Attachments never cross: the
// parent keeps the attachments of the values it hands back.
const (
	frameInit     = "init"
	frameReady    = "ready"
	frameExec     = "exec"
	frameCallback = "callback"
	frameCBResult = "cbr"
	frameCancel   = "cancel"
	frameResult   = "result"
)

// frame is every message; T says which fields are set.
type frame struct {
	T  string `json:"t"`
	ID uint64 `json:"id,omitempty"`

	// init
	Limits *Limits `json:"limits,omitempty"`
	// ready
	PID        int    `json:"pid,omitempty"`
	AddrLimit  uint64 `json:"addr_limit,omitempty"`
	AddrIdle   uint64 `json:"addr_idle,omitempty"`
	LimitError string `json:"limit_error,omitempty"`

	// exec; Code is bytes so that it crosses exactly, valid UTF-8 or not.
	// Caps are the names the script's realm binds (validated, sorted).
	CallID string   `json:"call_id,omitempty"`
	Code   []byte   `json:"code,omitempty"`
	Caps   []string `json:"caps,omitempty"`

	// callback and cbr
	Seq        int             `json:"seq,omitempty"`
	Capability string          `json:"cap,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Value      json.RawMessage `json:"value,omitempty"`
	Failed     bool            `json:"failed,omitempty"`
	Error      string          `json:"error,omitempty"`

	// result; Retire says the worker is not to be given another script:
	// the script broke its realm (see realm.broken), or the worker's
	// address space grew past its idle size plus MemoryBytes (see
	// runWorker).
	Outcome   *wireOutcome `json:"outcome,omitempty"`
	Cancelled bool         `json:"cancelled,omitempty"`
	Retire    bool         `json:"retire,omitempty"`
}

// wireOutcome is jstool.Outcome without attachments.
type wireOutcome struct {
	Value       json.RawMessage  `json:"value,omitempty"`
	Logs        []jstool.LogLine `json:"logs,omitempty"`
	LogsDropped int              `json:"logs_dropped,omitempty"`
	Failure     *jstool.Failure  `json:"failure,omitempty"`
}

func toWire(o jstool.Outcome) *wireOutcome {
	return &wireOutcome{Value: o.Value, Logs: o.Logs, LogsDropped: o.LogsDropped, Failure: o.Failure}
}

func (w *wireOutcome) outcome() jstool.Outcome {
	if w == nil {
		return jstool.Outcome{}
	}
	return jstool.Outcome{Value: w.Value, Logs: w.Logs, LogsDropped: w.LogsDropped, Failure: w.Failure}
}

// writeFrame writes f in one Write call.
func writeFrame(w io.Writer, f *frame) error {
	body, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("jsexec: encode %s frame: %w", f.T, err)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("jsexec: write %s frame: %w", f.T, err)
	}
	return nil
}

// readFrame reads one frame of at most max bytes.
func readFrame(r io.Reader, max int) (*frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("jsexec: frame of %d bytes exceeds %d", n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("jsexec: short frame: %w", err)
	}
	f := new(frame)
	if err := json.Unmarshal(body, f); err != nil {
		return nil, fmt.Errorf("jsexec: decode frame: %w", err)
	}
	return f, nil
}

// parentMaxFrame bounds a frame from the worker: a result or a callback
// argument (each bounded by MaxResultBytes, embedded verbatim), logs (JSON
// escaping may grow text up to 6x) and a failure message.
func parentMaxFrame(l Limits) int {
	return 2*l.MaxResultBytes + 8*l.MaxLogBytes + l.MaxLogLines*64 + 1<<20
}

// workerMaxFrame bounds a frame from the parent: a capability result the
// worker's heap could not hold anyway is refused by the parent first.
func workerMaxFrame(l Limits) int {
	return int(min(l.MemoryBytes, 1<<30)) + 1<<20
}
