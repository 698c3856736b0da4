// Package events is the one schema of Cairn's log: the envelope every event
// carries, the event types, their codec, and the subject names they are
// published on. Everything that reads or writes the log (store/jetstream,
// actors, projections, external consumers) goes through it. The form of
// every payload, version by version, is package events/wire's; each
// version's reader (schema.go) reads it into this package's types.
//
// Events are JSON. The type and the schema version travel both in the body
// and in NATS headers, with the CloudEvents attributes (ce-specversion,
// ce-type, ce-source, ce-id, ce-time) so generic NATS tooling can read them.
// Decoding an event of a newer schema version than this package knows is an
// error (ErrUnknownVersion); every older version stays decodable.
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cairn-agents/cairn/events/wire"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/session"
)

// Type names an event kind. Names are in the past tense: they record what
// happened.
type Type string

// The event types.
const (
	// CheckpointCommitted carries one checkpoint revision with its Append.
	CheckpointCommitted Type = "cairn.checkpoint.committed"
	// LeaseAcquired records a new owner (and epoch) of a run.
	LeaseAcquired Type = "cairn.lease.acquired"
	// WindowCompacted carries a session's new context window.
	WindowCompacted Type = "cairn.window.compacted"
	// RunCreated is the first event of a run: what it is and who started it.
	RunCreated Type = "cairn.run.created"
	// RunEnded ends a run that did not complete: cancelled or failed.
	RunEnded Type = "cairn.run.ended"
	// ChildSpawned, ChildCompleted, WaitRegistered and CallCancelled are
	// reserved for actor events between parents and children.
	ChildSpawned   Type = "cairn.child.spawned"
	ChildCompleted Type = "cairn.child.completed"
	WaitRegistered Type = "cairn.wait.registered"
	CallCancelled  Type = "cairn.call.cancelled"
)

// The payloads that are the same in memory as in the log are package
// wire's types (the schema), under their names here.
type (
	// Run is the payload of RunCreated.
	Run = wire.Run
	// RunBudget is a root run's limits; zero is unlimited.
	RunBudget = wire.RunBudget
	// Ended is the payload of RunEnded.
	Ended = wire.Ended
	// Lease is the payload of LeaseAcquired.
	Lease = wire.Lease
)

var known = map[Type]bool{CheckpointCommitted: true, LeaseAcquired: true, WindowCompacted: true, RunCreated: true, RunEnded: true,
	ChildSpawned: true, ChildCompleted: true, WaitRegistered: true, CallCancelled: true}

// Envelope is what every event carries.
type Envelope struct {
	Type      Type      `json:"type"`
	Version   int       `json:"version"`
	SessionID string    `json:"session_id"`
	RunID     string    `json:"run_id,omitempty"`
	Revision  int64     `json:"revision,omitempty"`
	Epoch     int64     `json:"epoch"`
	Time      time.Time `json:"time"`
	// Data is the type's payload, inline.
	Data json.RawMessage `json:"data,omitempty"`
	// DataRef points at a payload too large for one message, kept in the
	// object store. Exactly one of Data and DataRef is set.
	DataRef *ObjectRef `json:"data_ref,omitempty"`
}

// ObjectRef references a payload in the JetStream object store.
type ObjectRef struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Checkpoint is the payload of CheckpointCommitted as this build holds
// it, with the runtime's checkpoint (its log form is wire.Commit; a commit
// of any earlier version reads into it, Payload): the whole revision,
// Append included (C12, C17), but for its used call IDs when
// UsedCallIDsBase is set and its calls when CallsBaseRev is (a Folder, or
// a store's run handle, makes it whole).
type Checkpoint struct {
	Checkpoint runtime.Checkpoint `json:"checkpoint"`
	// UsedCallIDsBase, when set, is the log sequence of an earlier
	// checkpoint event of the same run, at revision UsedCallIDsBaseRev,
	// that lists every call ID the run had used by then (and has no base
	// of its own); this event's checkpoint.used_call_ids then lists only
	// the IDs used since, in order. The whole list is the base's followed
	// by this one's. Without it, a revision carried every ID the run ever
	// used: a run of n calls wrote O(n²) bytes. The revision finds the base
	// again in a copy of the log whose sequences differ.
	UsedCallIDsBase    uint64 `json:"used_call_ids_base,omitempty"`
	UsedCallIDsBaseRev int64  `json:"used_call_ids_base_rev,omitempty"`
	// CallsBaseRev, when set (schema version 2 on), is the revision of the
	// run that lists this response's calls whole (the commit of the
	// response), and CallsBase its log sequence (0 where the writer has no
	// sequences). This event's checkpoint.calls then lists only the calls
	// it changed from the revision just before it, without arguments, at
	// the journal's indices CallsAt: the whole journal is the previous
	// revision's with those calls' states and result IDs (ApplyCalls).
	CallsBase    uint64 `json:"calls_base,omitempty"`
	CallsBaseRev int64  `json:"calls_base_rev,omitempty"`
	CallsAt      []int  `json:"calls_at,omitempty"`
	// Ledger, when set (schema version 4 on), is what the run's commits
	// have charged its budget with, this one included (wire.Ledger).
	Ledger *Ledger `json:"ledger,omitempty"`
}

// Ledger is a run's budget as its commits charged it; its log form is
// wire.Ledger.
type Ledger = wire.Ledger

// Compaction is the payload of WindowCompacted with the runtime's
// compaction; its log form is wire.Compacted.
type Compaction struct {
	Compaction session.Compaction `json:"compaction"`
	RunID      string             `json:"run_id"`
}

// Errors of the codec.
var (
	ErrUnknownVersion = errors.New("events: unknown schema version")
	ErrUnknownType    = errors.New("events: unknown event type")
	ErrMalformed      = errors.New("events: malformed event")
)

// Header names. The type, session and run travel as CloudEvents attributes
// (ce-type, ce-source = cairn/<session>/<run>); Cairn adds the schema
// version and the lease epoch. Fewer header bytes per commit: every one of
// them is written and fsynced with the event.
const (
	HeaderVersion = "Cairn-Version"
	HeaderEpoch   = "Cairn-Epoch"
	CESpecVersion = "ce-specversion"
	CEType        = "ce-type"
	CESource      = "ce-source"
	CEID          = "ce-id"
	CETime        = "ce-time"
)

// An event's version is the least version of the schema that reads it
// right: a reader of an older one would misread it, so it refuses the
// event (ErrUnknownVersion), and a reader skips only what it cannot read.
// Every type's payload reads alike in versions 1 and 2 but a checkpoint
// commit that lists only the calls it changed (VersionOf). New and NewRaw
// build version 1 envelopes.

// VersionOf is the version of a checkpoint commit with payload p: 4 when
// it carries its run's budget totals (Ledger), 2 when it lists only the
// calls it changed, else 1.
func VersionOf(p *Checkpoint) int {
	if p.Ledger != nil {
		return LedgerVersion
	}
	if !p.ListsCalls() {
		return 2
	}
	return 1
}

// New builds an envelope with payload v.
func New(t Type, sessionID, runID string, revision, epoch int64, at time.Time, v any) (Envelope, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Envelope{}, fmt.Errorf("events: encode %s: %w", t, err)
	}
	return Envelope{Type: t, Version: 1, SessionID: sessionID, RunID: runID, Revision: revision, Epoch: epoch, Time: at.UTC(), Data: data}, nil
}

// NewRun builds the RunCreated envelope of r for a store that writes
// schema level: at DefinitionVersion when r names its definition version,
// and with no definition version below that level (the record returned is
// the one encoded).
func NewRun(r Run, at time.Time, level int) (Envelope, Run, error) {
	if level < DefinitionVersion {
		r.Definition = ""
	}
	e, err := New(RunCreated, r.SessionID, r.RunID, 0, 0, at, r)
	if err == nil && r.Definition != "" {
		e.Version = DefinitionVersion
	}
	return e, r, err
}

// NewRaw builds an envelope around an already encoded payload, which must
// be valid JSON (the commit path encodes a checkpoint once and reuses the
// bytes).
func NewRaw(t Type, sessionID, runID string, revision, epoch int64, at time.Time, data json.RawMessage) Envelope {
	return Envelope{Type: t, Version: 1, SessionID: sessionID, RunID: runID, Revision: revision, Epoch: epoch, Time: at.UTC(), Data: data}
}

// NewCommit builds a CheckpointCommitted envelope around a checkpoint
// already encoded as JSON, on the listings on (CheckpointPayloadWith), at
// the least version that reads it (VersionOf): 2 when it lists only the
// calls it changed. A version 1 envelope around such a payload would be
// read as listing the whole journal (version 1's reader, as its builds
// did, ignores the later keys): build commits with this, not NewRaw.
func NewCommit(sessionID, runID string, revision, epoch int64, at time.Time, checkpoint []byte, on Bases) Envelope {
	e := NewRaw(CheckpointCommitted, sessionID, runID, revision, epoch, at, CheckpointPayloadWith(checkpoint, on))
	e.Version = VersionOf(&Checkpoint{CallsBaseRev: on.CallsRev, Ledger: on.Ledger})
	return e
}

// CheckpointPayload encodes the payload of CheckpointCommitted around a
// checkpoint already encoded as JSON.
func CheckpointPayload(checkpoint []byte) json.RawMessage {
	return CheckpointPayloadOn(checkpoint, 0, 0)
}

// CheckpointPayloadOn is CheckpointPayload with a used-call-ID base: the
// log sequence and revision of the run's listing (Checkpoint.UsedCallIDsBase
// and UsedCallIDsBaseRev; 0: none).
func CheckpointPayloadOn(checkpoint []byte, baseSeq uint64, baseRev int64) json.RawMessage {
	return CheckpointPayloadWith(checkpoint, Bases{UsedSeq: baseSeq, UsedRev: baseRev})
}

// Bases are what a checkpoint's payload builds on: the full listing of
// its used call IDs (Checkpoint.UsedCallIDsBase, UsedCallIDsBaseRev) and
// the listing of its calls (CallsBase, CallsBaseRev, with the indices of
// the calls it changed, CallsAt). Zero: the checkpoint lists them whole.
type Bases struct {
	UsedSeq  uint64
	UsedRev  int64
	CallsSeq uint64
	CallsRev int64
	CallsAt  []int
	// Ledger is the run's budget totals the commit carries (nil: none).
	Ledger *Ledger
}

// CheckpointPayloadWith is CheckpointPayload on bases.
func CheckpointPayloadWith(checkpoint []byte, on Bases) json.RawMessage {
	// The most each member can add (numbers of 20 digits), so that the
	// payload is allocated once: a smaller guess grew it in most commits.
	n := len(checkpoint) + len(`{"checkpoint":}`)
	if on.UsedSeq > 0 {
		n += len(`,"used_call_ids_base":,"used_call_ids_base_rev":`) + 40
	}
	if on.CallsRev > 0 {
		n += len(`,"calls_base":,"calls_base_rev":,"calls_at":[]`) + 40 + 21*len(on.CallsAt)
	}
	if on.Ledger != nil {
		n += len(`,"ledger":{"steps":,"input_tokens":,"output_tokens":}`) + 60
	}
	b := make([]byte, 0, n)
	b = append(b, `{"checkpoint":`...)
	b = append(b, checkpoint...)
	if on.UsedSeq > 0 {
		b = append(b, `,"used_call_ids_base":`...)
		b = strconv.AppendUint(b, on.UsedSeq, 10)
		b = append(b, `,"used_call_ids_base_rev":`...)
		b = strconv.AppendInt(b, on.UsedRev, 10)
	}
	if on.CallsRev > 0 {
		if on.CallsSeq > 0 {
			b = append(b, `,"calls_base":`...)
			b = strconv.AppendUint(b, on.CallsSeq, 10)
		}
		b = append(b, `,"calls_base_rev":`...)
		b = strconv.AppendInt(b, on.CallsRev, 10)
		if len(on.CallsAt) > 0 {
			b = append(b, `,"calls_at":[`...)
			for i, at := range on.CallsAt {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, int64(at), 10)
			}
			b = append(b, ']')
		}
	}
	if l := on.Ledger; l != nil {
		b = append(b, `,"ledger":{"steps":`...)
		b = strconv.AppendInt(b, int64(l.Steps), 10)
		b = append(b, `,"input_tokens":`...)
		b = strconv.AppendInt(b, l.InputTokens, 10)
		b = append(b, `,"output_tokens":`...)
		b = strconv.AppendInt(b, l.OutputTokens, 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// Encode returns the body and the headers of an event. id is its unique ID
// (the NATS Msg-Id), also its CloudEvents id. The envelope is written by
// hand around the payload bytes: on the commit path it is the only encoding
// of the checkpoint after the one the store compares retries against.
func Encode(e Envelope, id string) (body []byte, headers map[string]string, err error) {
	if !known[e.Type] {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownType, e.Type)
	}
	if e.Version < 1 || e.Version > SchemaVersion {
		return nil, nil, fmt.Errorf("%w: version %d, this build writes 1 to %d", ErrMalformed, e.Version, SchemaVersion)
	}
	if !plainID(e.SessionID) || (e.RunID != "" && !plainID(e.RunID)) {
		return nil, nil, fmt.Errorf("%w: session %q / run %q are not valid IDs", ErrMalformed, e.SessionID, e.RunID)
	}
	body = make([]byte, 0, len(e.Data)+256)
	body = append(body, `{"type":"`...)
	body = append(body, e.Type...)
	body = append(body, `","version":`...)
	body = strconv.AppendInt(body, int64(e.Version), 10)
	body = append(body, `,"session_id":"`...)
	body = append(body, e.SessionID...)
	body = append(body, '"')
	if e.RunID != "" {
		body = append(body, `,"run_id":"`...)
		body = append(body, e.RunID...)
		body = append(body, '"')
	}
	if e.Revision != 0 {
		body = append(body, `,"revision":`...)
		body = strconv.AppendInt(body, e.Revision, 10)
	}
	body = append(body, `,"epoch":`...)
	body = strconv.AppendInt(body, e.Epoch, 10)
	body = append(body, `,"time":"`...)
	body = e.Time.AppendFormat(body, time.RFC3339Nano)
	body = append(body, '"')
	if e.DataRef != nil {
		ref, err := json.Marshal(e.DataRef)
		if err != nil {
			return nil, nil, fmt.Errorf("events: encode %s: %w", e.Type, err)
		}
		body = append(body, `,"data_ref":`...)
		body = append(body, ref...)
	} else {
		if len(e.Data) == 0 {
			return nil, nil, fmt.Errorf("%w: %s without a payload", ErrMalformed, e.Type)
		}
		body = append(body, `,"data":`...)
		body = append(body, e.Data...)
	}
	body = append(body, '}')
	headers = map[string]string{
		HeaderVersion: strconv.Itoa(e.Version), HeaderEpoch: strconv.FormatInt(e.Epoch, 10),
		CESpecVersion: "1.0", CEType: string(e.Type), CESource: "cairn/" + e.SessionID, CEID: id, CETime: e.Time.Format(time.RFC3339Nano),
	}
	if e.RunID != "" {
		headers[CESource] += "/" + e.RunID
	}
	return body, headers, nil
}

// Decode parses an event body. A newer schema version is ErrUnknownVersion.
// A sealed body is ErrSealed: decode it with the Keyring's Decode.
func Decode(body []byte) (Envelope, error) {
	if id, sealed := SealedBy(body); sealed {
		return Envelope{}, fmt.Errorf("%w (key %q): give the reader the node's payload keys", ErrSealed, id)
	}
	e, err := decodeEnvelope(body)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case e.Version > SchemaVersion:
		return Envelope{}, fmt.Errorf("%w: %s version %d, this build reads up to %d", ErrUnknownVersion, e.Type, e.Version, SchemaVersion)
	case e.Version < 1:
		return Envelope{}, fmt.Errorf("%w: version %d", ErrMalformed, e.Version)
	case !known[e.Type]:
		return Envelope{}, fmt.Errorf("%w: %q", ErrUnknownType, e.Type)
	case e.SessionID == "":
		return Envelope{}, fmt.Errorf("%w: %s without a session", ErrMalformed, e.Type)
	case (len(e.Data) == 0) == (e.DataRef == nil):
		return Envelope{}, fmt.Errorf("%w: %s needs exactly one of data and data_ref", ErrMalformed, e.Type)
	}
	return e, nil
}

// Payload decodes an inline payload into v, read as the envelope's
// schema version wrote it: a *Checkpoint goes through that version's
// reader and upcasters (schema.go), so it has this build's form whatever
// the version. A version this build does not read is ErrUnknownVersion.
func (e Envelope) Payload(v any) error {
	if e.DataRef != nil {
		return fmt.Errorf("events: %s payload is in the object store (%s/%s): resolve it first", e.Type, e.DataRef.Bucket, e.DataRef.Key)
	}
	ver, err := versionOf(e.Version)
	if err != nil {
		return fmt.Errorf("%s payload: %w", e.Type, err)
	}
	if p, ok := v.(*Checkpoint); ok {
		err = ver.commit(e.Data, p)
	} else {
		err = json.Unmarshal(e.Data, v)
	}
	if err != nil {
		return fmt.Errorf("%w: %s payload: %v", ErrMalformed, e.Type, err)
	}
	return nil
}

// DefaultStream is the run log's stream unless one is configured
// (jetstream.Config.Stream, the node's --stream). Every reader and writer
// of the log names its stream through StreamName.
const DefaultStream = "CAIRN"

// CheckStreamName reports why name cannot name the log's stream (nil when
// it can): JetStream's rule (no whitespace, ".", "*", ">", path separators
// or control characters; at most 255 bytes). A wildcard would also widen
// the reader user's permissions, which name the stream.
func CheckStreamName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > 255:
		return fmt.Errorf("%d bytes, at most 255", len(name))
	case strings.ContainsAny(name, ".*>/\\"):
		return fmt.Errorf("%q holds one of . * > / \\", name)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError {
			return fmt.Errorf("%q holds whitespace or a control character", name)
		}
	}
	return nil
}

// StreamName is the stream a configured name means: name, or
// DefaultStream when it is empty.
func StreamName(name string) string {
	if name == "" {
		return DefaultStream
	}
	return name
}

// Subjects. A session's events share the prefix cairn.sess.<session>, so one
// filtered consumer reads a conversation in order; a run's events share
// cairn.sess.<session>.run.<run>.
const Prefix = "cairn"

// plainID is tokenRE without the regexp, for the commit path.
func plainID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidID reports whether id can be a session or run ID: it becomes one
// subject token.
func ValidID(id string) error {
	if !plainID(id) {
		return fmt.Errorf("events: ID %q must be 1-128 characters of letters, digits, _ and -", id)
	}
	return nil
}

// SubjectMatches reports whether a literal NATS subject matches filter
// ('*' is one token, a final '>' one or more).
func SubjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		if ft == ">" {
			return subject != ""
		}
		st, srest, smore := strings.Cut(subject, ".")
		if ft != "*" && ft != st {
			return false
		}
		if !fmore || !smore {
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}

// SessionAll matches every event of a session.
func SessionAll(sessionID string) string { return Prefix + ".sess." + sessionID + ".>" }

// RunAll matches every event of a run.
func RunAll(sessionID, runID string) string {
	return Prefix + ".sess." + sessionID + ".run." + runID + ".>"
}

// CheckpointSubject is the subject of one checkpoint commit of a run. The
// completed commit (the one with the Reply) goes to its own subject, so a
// consumer of completions sees exactly them, atomically with the commit.
func CheckpointSubject(sessionID, runID string, completed bool) string {
	kind := "step"
	if completed {
		kind = "done"
	}
	return Prefix + ".sess." + sessionID + ".run." + runID + ".c." + kind
}

// RunCheckpoints matches a run's checkpoint commits.
func RunCheckpoints(sessionID, runID string) string {
	return Prefix + ".sess." + sessionID + ".run." + runID + ".c.*"
}

// RunCreatedSubject is the subject of a run's creation event.
func RunCreatedSubject(sessionID, runID string) string {
	return Prefix + ".sess." + sessionID + ".run." + runID + ".created"
}

// RunEndedSubject is the subject of a run's end event.
func RunEndedSubject(sessionID, runID string) string {
	return Prefix + ".sess." + sessionID + ".run." + runID + ".end"
}

// SessionRunsCreated matches the creation events of a session's runs.
func SessionRunsCreated(sessionID string) string {
	return Prefix + ".sess." + sessionID + ".run.*.created"
}

// AllEnded matches every run end event.
const AllEnded = Prefix + ".sess.*.run.*.end"

// RunLease is the subject of a run's lease events.
func RunLease(sessionID, runID string) string {
	return Prefix + ".sess." + sessionID + ".run." + runID + ".lease"
}

// SessionCheckpoints matches the checkpoint commits of every run of a session.
func SessionCheckpoints(sessionID string) string {
	return Prefix + ".sess." + sessionID + ".run.*.c.*"
}

// SessionLeases matches the lease events of every run of a session.
func SessionLeases(sessionID string) string { return Prefix + ".sess." + sessionID + ".run.*.lease" }

// SessionCompactions is the subject of a session's compactions.
func SessionCompactions(sessionID string) string { return Prefix + ".sess." + sessionID + ".compact" }

// AllCheckpoints matches every checkpoint commit of every run.
const AllCheckpoints = Prefix + ".sess.*.run.*.c.*"

// AllCompletions matches every completed commit of every run.
const AllCompletions = Prefix + ".sess.*.run.*.c.done"
