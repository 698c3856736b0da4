//go:build !cairn_schema1

package actors

// EarlierActiveSet is true in a build that stands for an earlier one in
// the tests of a rolling upgrade (-tags cairn_schema1): it sweeps the
// bucket cairn_active alone and writes every run there, as the builds
// before the active set was derived from the log did. False in every
// other build.
const EarlierActiveSet = false
