package events

import (
	"encoding/json"
	"fmt"

	"github.com/cairn-agents/cairn/events/wire"
	"github.com/cairn-agents/cairn/runtime"
)

// The log's schema versions as this build reads them. Package wire holds
// each version's payloads; here each version has its reader, which takes
// a payload of that version to this build's in-memory form, through one
// upcaster per version step that changed the payload.
//
// What is held in memory (Checkpoint, Compaction) embeds the runtime's
// structs, and the commit path encodes those structs as they are, with no
// conversion to the wire types on the way; the readers decode into them
// as directly. Converting a response commit of 3 calls cost 5
// allocations more than its encoding's 16, 12% more bytes and about a
// tenth more time (BenchmarkCheckpointEncode: encode against
// encode-via-wire; reading through the wire types, 5 more than 86). The
// wire types are the one definition of the encoding all the same:
// TestRuntimeEncodesAsWire compares every in-memory form with its
// version's wire type field by field (JSON names, options, types), and
// over filled and random values byte by byte, so a change of the
// runtime's structs that would change the log fails there, naming the
// field; TestRecordedPayloadsAreWire holds the recorded logs to them.

// A version is one schema version as this build reads it.
type version struct {
	// payloads are the version's event types and the Go types of their
	// payloads as it writes them (nil: reserved, no payload defined). The
	// golden description of the schema (TestWireSchema) is made of them.
	payloads map[Type]any
	// commit reads a CheckpointCommitted payload of the version into p,
	// upcast to this build's form.
	commit func(data []byte, p *Checkpoint) error
}

// versions[v] is schema version v. A version that changes a payload
// adds its reader (decoding into the version's own form) and the upcaster
// from the version before; one that changes none reads it as the version
// before does. An earlier version's entry never changes: logs written in
// it are read as they were written.
var versions = []version{
	1: {payloads: payloads(map[Type]any{CheckpointCommitted: wire.CommitV1{}}), commit: readCommitV1},
	2: {payloads: payloads(map[Type]any{CheckpointCommitted: wire.CommitV2{}}), commit: readCommitV2},
	// Version 3 adds a type (SessionPurged); a commit reads as in 2.
	3: {payloads: payloads(map[Type]any{CheckpointCommitted: wire.CommitV2{}, SessionPurged: Purge{}}), commit: readCommitV2},
	// Version 4: a commit may carry its run's budget totals (ledger); a
	// run's record may name its definition version (an omitempty field,
	// which a reader of version 4 that predates it ignores: it runs the
	// run under its current definition, as before runs were pinned).
	4: {payloads: payloads(map[Type]any{CheckpointCommitted: wire.CommitV4{}, SessionPurged: Purge{}, RunCreated: wire.Run{}}), commit: readCommit},
	// Version 5 adds a type (RunUpgraded); a commit reads as in 4.
	5: {payloads: payloads(map[Type]any{CheckpointCommitted: wire.CommitV4{}, SessionPurged: Purge{}, RunCreated: wire.Run{}, RunUpgraded: wire.Upgrade{}}), commit: readCommit},
}

// payloads is the payloads every version so far writes alike, with a
// version's own.
func payloads(own map[Type]any) map[Type]any {
	m := map[Type]any{
		LeaseAcquired: wire.Lease{}, WindowCompacted: wire.Compacted{}, RunCreated: wire.RunV1{}, RunEnded: wire.Ended{},
		ChildSpawned: nil, ChildCompleted: nil, WaitRegistered: nil, CallCancelled: nil,
	}
	for t, p := range own {
		m[t] = p
	}
	return m
}

// versionOf is schema version v's reader: ErrUnknownVersion above the
// newest this build reads, ErrMalformed below 1.
func versionOf(v int) (*version, error) {
	switch {
	case v > SchemaVersion:
		return nil, fmt.Errorf("%w: version %d, this build reads up to %d", ErrUnknownVersion, v, SchemaVersion)
	case v < 1:
		return nil, fmt.Errorf("%w: version %d", ErrMalformed, v)
	case v >= len(versions) || versions[v].commit == nil:
		return nil, fmt.Errorf("%w: version %d has no reader in this build", ErrMalformed, v)
	}
	return &versions[v], nil
}

// commitV1 is a version 1 commit (wire.CommitV1) in this build's
// memory: Checkpoint's fields, under version 1's JSON, where the fields
// of later versions are not read ("-"). Having Checkpoint's fields, it
// converts to and from *Checkpoint in place: reading a version 1 commit
// (most commits are: all but those that list changed calls, VersionOf)
// costs what reading this build's form does. It lacks one field of
// wire.CommitV1, calls[].result (see readCommitV1), which
// TestRuntimeEncodesAsWire allows it and nothing else.
type commitV1 struct {
	Checkpoint         runtime.Checkpoint `json:"checkpoint"`
	UsedCallIDsBase    uint64             `json:"used_call_ids_base,omitempty"`
	UsedCallIDsBaseRev int64              `json:"used_call_ids_base_rev,omitempty"`
	CallsBase          uint64             `json:"-"`
	CallsBaseRev       int64              `json:"-"`
	CallsAt            []int              `json:"-"`
	Ledger             *Ledger            `json:"-"`
}

// readCommitV1 reads a version 1 commit. Keys of later versions in a
// version 1 payload are not read, as a build of version 1 ignored them:
// its calls are always the whole journal. A call of the first version 1
// builds held its whole tool result message (wire.CallV1.Result): that
// message is in the transcript (the same commit's append), and the call
// is read without it, as every build since has read it. Its ID is not
// made the call's result_id: those logs re-drive on this build up to the
// commit where the journal began to name results (projections/replay
// TestRedriveEarlierBuildsLogs), showing what the earlier build wrote.
func readCommitV1(data []byte, p *Checkpoint) error {
	*p = Checkpoint{}
	c := (*commitV1)(p)
	if err := json.Unmarshal(data, c); err != nil {
		return err
	}
	upcastCommit1(c)
	return nil
}

// upcastCommit1 makes a version 1 commit version 2's, in place: version
// 1 lists the calls whole, so it names no listing of them.
func upcastCommit1(c *commitV1) *Checkpoint {
	c.CallsBase, c.CallsBaseRev, c.CallsAt, c.Ledger = 0, 0, nil, nil
	return (*Checkpoint)(c)
}

// readCommit reads a commit of this build's form (version 4).
func readCommit(data []byte, p *Checkpoint) error {
	*p = Checkpoint{}
	return json.Unmarshal(data, p)
}

// readCommitV2 reads a commit of versions 2 and 3: this build's form
// without the budget totals, which those versions do not have (a ledger
// key in such a payload is not read, as their builds ignored it).
func readCommitV2(data []byte, p *Checkpoint) error {
	if err := readCommit(data, p); err != nil {
		return err
	}
	p.Ledger = nil
	return nil
}
