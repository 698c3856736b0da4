//go:build cairn_schema1

package events

// SchemaVersion of a build made with -tags cairn_schema1: the build of
// schema version 1 (every checkpoint lists its calls whole, version 2
// events refused), for the tests of a rolling upgrade from it to this one
// (test/chaos TestRollingUpgrade). Not for production builds.
const SchemaVersion = 1
