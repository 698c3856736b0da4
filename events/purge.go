package events

import "github.com/cairn-agents/cairn/events/wire"

// SessionPurged is the last event of a session whose retention ran out:
// the node purged every earlier event of the session from the log (a
// fenced, logged operation: docs/operations.md, Retention) and this marker
// is what remains. It says which runs the session had, how each ended and
// when it was purged, so the run index, the API and the run page can say
// "purged" instead of not found, and a continuation of the session is
// refused.
const SessionPurged Type = "cairn.session.purged"

// PurgeVersion is the schema version of a SessionPurged event: a build
// that reads less does not know the type. A cluster purges only once every
// member reads it (the level, operations.md Upgrades).
const PurgeVersion = 3

// LedgerVersion is the schema version of a checkpoint commit that carries
// its run's budget totals (Checkpoint.Ledger): a build of an earlier one
// would read the commit and count the run's budget as unspent.
const LedgerVersion = 4

// UpgradeVersion is the schema version of a RunUpgraded event: a build
// that reads less does not know the type. A cluster upgrades runs only
// once every member reads it (the level, operations.md Upgrades).
const UpgradeVersion = 5

// RunUpgraded moves a run to another definition version (Upgrade), at
// its next model boundary.
const RunUpgraded Type = "cairn.run.upgraded"

// Upgrade is the payload of RunUpgraded.
type Upgrade = wire.Upgrade

// AllUpgraded matches every run's upgrades.
const AllUpgraded = Prefix + ".sess.*.run.*.upgraded"

// RunUpgradedSubject is the subject of a run's upgrades.
func RunUpgradedSubject(sessionID, runID string) string {
	return Prefix + ".sess." + sessionID + ".run." + runID + ".upgraded"
}

// DefinitionVersion is the schema version of a run record that names its
// definition version (Run.Definition): written only at that level, so
// that a member of a cluster pinned below it (operations.md, Upgrades)
// never meets a field its build does not know; below it runs are not
// pinned (NewRun).
const DefinitionVersion = 4

func init() { known[SessionPurged], known[RunUpgraded] = true, true }

// Purge is the payload of SessionPurged (wire.Purge), and PurgedRun one
// run of a purged session (wire.PurgedRun).
type (
	Purge     = wire.Purge
	PurgedRun = wire.PurgedRun
)

// SessionPurgedSubject is the subject of a session's purge marker.
func SessionPurgedSubject(sessionID string) string { return Prefix + ".sess." + sessionID + ".purged" }

// AllPurged matches every session's purge marker.
const AllPurged = Prefix + ".sess.*.purged"
