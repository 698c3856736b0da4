//go:build !cairn_schema1

package events

// SchemaVersion is the newest version of the schema this build reads and
// writes. Version 2: a checkpoint commit may list only the calls it
// changed (Checkpoint.CallsAt); a build that reads only version 1 would
// take those for the whole journal, so it refuses version 2
// (ErrUnknownVersion). Version 3: a session's purge marker
// (SessionPurged), a type earlier builds do not know. Version 4: a
// checkpoint commit may carry its run's budget totals (Checkpoint.Ledger),
// which an earlier build would ignore and so count the run's budget as
// unspent. Version 5: a run's upgrade to another definition version
// (RunUpgraded), a type earlier builds do not know. Every version before
// is read as it was written.
// A store writes the version its cluster's members all read
// (store/jetstream Config.Schema), at most this one.
const SchemaVersion = 5
