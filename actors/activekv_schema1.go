//go:build cairn_schema1

package actors

// EarlierActiveSet: this build stands for an earlier one (see activekv.go);
// not for production builds.
const EarlierActiveSet = true
